"""A build request: how a build picks its executor (the warm server locally, worker processes on
CI), its remote cache, and the request's values."""

from __future__ import annotations

import pytest

from ptebuild.api.request import BuildRequest, RemoteCache, cache_root, executor_name, remote_cache
from ptebuild.errors import UsageError


class _Cache:
    """A build with a local cache folder."""


def _executor(request: BuildRequest, cache) -> str:
    return executor_name(request, local_cache=cache is not None)


def args(**given) -> BuildRequest:
    return BuildRequest(executor=given.get("executor"), no_daemon=given.get("no_daemon", False))


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
    with pytest.raises(UsageError, match=r"^--executor: no executor 'rey' \(did you mean 'ray'\?\); use one of local, daemon, ray$"):
        _executor(args(executor="rey"), _Cache())
    with pytest.raises(UsageError, match="drop --no-cache"):
        _executor(args(executor="daemon"), None)


def test_a_request_is_a_frozen_value():
    request = BuildRequest(jobs=2, only=["a", "b"])
    assert request.only == ("a", "b") and request.jobs == 2 and request.partial
    assert request == BuildRequest(jobs=2, only=("a", "b")) and hash(request) == hash(BuildRequest(jobs=2, only=("a", "b")))
    with pytest.raises(AttributeError):
        request.jobs = 3  # type: ignore[misc]
    assert request.replace(jobs=3).jobs == 3 and request.jobs == 2
    with pytest.raises(TypeError, match="no field 'job'"):
        BuildRequest(job=2)
    assert repr(request) == "BuildRequest(only=('a', 'b'), jobs=2)"
    with pytest.raises(UsageError, match="--jobs 0: give at least 1"):
        BuildRequest(jobs=0).validate()


def test_the_remote_cache_fills_its_blanks_from_the_environment(tmp_path):
    env = {"PTEBUILD_REMOTE_CACHE": "http://127.0.0.1:1/", "PTEBUILD_REMOTE_UPLOAD": "no"}
    assert remote_cache(BuildRequest(), {}) is None
    assert remote_cache(BuildRequest(), env) == RemoteCache(url="http://127.0.0.1:1/", upload=False)
    given = RemoteCache(url="http://cache:9090", headers=["Authorization=Bearer x"], upload=True)
    assert remote_cache(BuildRequest(remote=given), env) == given
    assert remote_cache(BuildRequest(remote=RemoteCache(upload=True)), env).url == "http://127.0.0.1:1/"
    # credentials never reach a report or a stamp: only the header's name
    assert given.to_json()["headers"] == ["Authorization"]
    assert cache_root(BuildRequest(no_cache=True)) is None
    assert cache_root(BuildRequest(cache=str(tmp_path))) == tmp_path
