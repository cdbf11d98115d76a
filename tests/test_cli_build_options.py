"""How ``ptebuild build`` picks its executor: the warm server locally, worker processes on CI."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

import pytest

from ptebuild.cli.build import _executor
from ptebuild.errors import UsageError


class _Cache:
    local_root = Path("/tmp/cache")


def args(**given) -> Namespace:
    return Namespace(executor=given.get("executor"), no_daemon=given.get("no_daemon", False))


@pytest.mark.parametrize(
    ("given", "env", "cache", "expected"),
    [
        ({}, {}, _Cache(), "daemon"),
        ({}, {"CI": "true"}, _Cache(), "local"),
        ({"no_daemon": True}, {}, _Cache(), "local"),
        ({}, {"PTEBUILD_NO_DAEMON": "1"}, _Cache(), "local"),
        ({}, {}, None, "local"),  # --no-cache: the server's socket lives in the cache folder
        ({"executor": "ray"}, {"CI": "true"}, _Cache(), "ray"),
        ({}, {"PTEBUILD_EXECUTOR": "ray"}, _Cache(), "ray"),
        ({"executor": "daemon"}, {"PTEBUILD_NO_DAEMON": "1"}, _Cache(), "daemon"),
    ],
)
def test_executor_choice(monkeypatch, given, env, cache, expected):
    for name in ("CI", "PTEBUILD_NO_DAEMON", "PTEBUILD_EXECUTOR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert _executor(args(**given), cache) == expected


def test_unknown_executor_and_daemon_without_cache(monkeypatch):
    monkeypatch.delenv("PTEBUILD_EXECUTOR", raising=False)
    with pytest.raises(UsageError, match=r"^--executor: no executor 'rey' \(did you mean 'ray'\?\)$"):
        _executor(args(executor="rey"), _Cache())
    with pytest.raises(UsageError, match="drop --no-cache"):
        _executor(args(executor="daemon"), None)
