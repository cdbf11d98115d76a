"""The no-op stamp: a build with nothing to do replays the last no-op without looking further,
and anything it looked at that moves sends the build down the full path again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from project_copy import copy_project

from ptebuild.builder import noop

ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}


def build(manifest: Path, cache: Path, *extra: str, trace: bool = False) -> tuple[dict, subprocess.CompletedProcess]:
    flags = ["-X", "importtime"] if trace else []
    result = subprocess.run(
        [sys.executable, *flags, "-m", "ptebuild", "build", str(manifest), "--cache", str(cache), "--json", *extra],
        capture_output=True, text=True, env=ENV,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), result


def imported(result: subprocess.CompletedProcess) -> set[str]:
    return {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}


def settle() -> None:
    time.sleep(noop.RACY_NS / 1e9 + 0.1)  # files written just now are not trusted by a stamp


@pytest.fixture(scope="module")
def stamped(tmp_path_factory):
    """The tiny project built, then no-op'd once so that a stamp exists."""
    root = tmp_path_factory.mktemp("noop")
    manifest = copy_project(root / "project")
    cache = root / "cache"
    build(manifest, cache, "--only", "tiny_portable")
    settle()
    document, _ = build(manifest, cache, "--only", "tiny_portable")
    assert [p["status"] for p in document["programs"]] == ["cached"]
    assert list((cache / "noop").iterdir()), "the no-op wrote no stamp"
    return manifest, cache, document


def test_a_stamped_noop_replays_without_the_build_machinery(stamped):
    manifest, cache, before = stamped
    document, result = build(manifest, cache, "--only", "tiny_portable", trace=True)
    modules = imported(result)
    assert "ptebuild.builder.noop" in modules
    assert not {"ptebuild.builder.build", "ptebuild.store", "torch", "sqlite3"} & modules
    assert {**document, "seconds": 0} == {**before, "seconds": 0}


@pytest.mark.parametrize(
    "change",
    ["edit the model's source", "delete an output", "install a distribution", "drop the cache entry"],
)
def test_anything_that_moved_means_a_full_build(stamped, tmp_path, change):
    manifest, cache, _ = stamped
    project = tmp_path / "project"
    import shutil

    shutil.copytree(manifest.parent, project, symlinks=True)
    shutil.copytree(cache, tmp_path / "cache", symlinks=True)
    copy, cache = project / manifest.name, tmp_path / "cache"
    for _ in range(2):  # first: the copies' stamp is written; second: replayed
        settle()
        build(copy, cache, "--only", "tiny_portable")
    document, result = build(copy, cache, "--only", "tiny_portable", trace=True)
    assert "ptebuild.builder.build" not in imported(result), "the copy's no-op was not replayed"

    site = tmp_path / "site"
    site.mkdir()
    env_path = {}
    if change == "edit the model's source":
        source = project / "tinymodels" / "tiny.py"
        source.write_text(source.read_text() + "\n# edited\n")
    elif change == "delete an output":
        (project / "out" / "tiny_portable.pte").unlink()
    elif change == "install a distribution":
        # A new dist-info folder on sys.path: the discovered dependencies must be checked again.
        for entry in map(Path, sys.path):
            if entry.name == "site-packages" and os.access(entry, os.W_OK):
                marker = entry / "ptebuild_noop_test_marker-1.0.dist-info"
                marker.mkdir()
                env_path["marker"] = marker
                break
        else:
            pytest.skip("no writable site-packages")
    else:
        for path in (cache / "actions").rglob("*.json"):
            path.unlink()
    try:
        document, result = build(copy, cache, "--only", "tiny_portable", trace=True)
    finally:
        if "marker" in env_path:
            env_path["marker"].rmdir()
    assert "ptebuild.builder.build" in imported(result), change
    status = document["programs"][0]["status"]
    assert status == ("built" if change in ("edit the model's source", "drop the cache entry") else "cached"), change
    assert (project / "out" / "tiny_portable.pte").is_file()
