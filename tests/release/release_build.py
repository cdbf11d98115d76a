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


# The tiny project with release bundles: a program whose weights stay inside its .pte and that
# bundles its test cases, a bundle of three programs with an included file, and a bundle (a
# zip of its own name) whose programs all bundle their test cases.
BUNDLES = """
[programs.tiny_inside]
model = "tiny"
backend = "portable"
bundle_io = true

[bundles.edge]
programs = ["tiny_portable", "tiny_inside", "tiny_xnnpack"]
include = ["NOTICE"]

[bundles.mobile]
programs = ["tiny_x*"]
output = "tiny-mobile.zip"
bundle_io = true
"""
BUNDLE_PROGRAMS = ("tiny_inside", "tiny_portable", "tiny_xnnpack")
NOTICE = "The tiny models of ptebuild's tests.\n"


def bundle_project(dest: Path) -> Path:
    """A copy of the tiny project with :data:`BUNDLES` declared: returns its manifest."""
    manifest = copy_project(dest)
    manifest.write_text(manifest.read_text() + BUNDLES)
    (dest / "NOTICE").write_text(NOTICE)
    return manifest


def built_bundles(factory: pytest.TempPathFactory, which: str = "a", edit=None) -> Path:
    """The bundle project built from a clean cache of its own, once per session per ``which``
    (``<basetemp>/bundles-<which>/project``, cache beside it); ``edit(text) -> text`` changes its
    manifest first. Tests copy what they damage."""
    from ptebuild import cli

    root = factory.getbasetemp() / f"bundles-{which}"
    manifest = root / "project" / "tiny.toml"
    if (manifest.parent / "out" / "ptebuild.json").is_file():
        return manifest
    bundle_project(root / "project")
    if edit is not None:
        manifest.write_text(edit(manifest.read_text()))
    code = cli.main(["build", str(manifest), "--cache", str(root / "cache"), "--jobs", "2"])
    assert code == 0, f"the bundle project ({which}) does not build"
    return manifest


def bundle_cache(manifest: Path) -> Path:
    """The cache :func:`built_bundles` built ``manifest`` with."""
    return manifest.parent.parent / "cache"
