"""One build of the tiny project per test session, shared by the release and inspect/diff tests.

The build lands in ``<basetemp>/release-tiny/project`` (manifest, models, ``out/``) with the
session's shared cache (``<basetemp>/ptebuild-cache``, also used by ``test_cli_verify``), and
is built only once whichever module asks first. Tests copy what they damage.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from project_copy import copy_project

PROGRAMS = ("tiny_portable", "tiny_xnnpack")


def cache_dir(factory: pytest.TempPathFactory) -> Path:
    return factory.getbasetemp() / "ptebuild-cache"


def built_tiny(factory: pytest.TempPathFactory) -> Path:
    """The manifest of the built tiny project (its outputs are in ``out/`` beside it)."""
    from ptebuild import cli

    root = factory.getbasetemp() / "release-tiny"
    manifest = root / "project" / "tiny.toml"
    if (manifest.parent / "out" / "ptebuild.json").is_file():
        return manifest
    copy_project(root / "project")
    code = cli.main(["build", str(manifest), "--cache", str(cache_dir(factory))])
    assert code == 0, "the tiny project does not build"
    return manifest
