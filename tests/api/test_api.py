"""ptebuild as a library: build, lock, verify, inspect and pack from Python, with typed reports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from project_copy import copy_project

import ptebuild
from ptebuild.errors import ManifestError, UsageError
from ptebuild.results import Status


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> tuple[Path, Path]:
    """The tiny project built once through the library: (manifest, cache)."""
    root = tmp_path_factory.mktemp("api")
    manifest = copy_project(root / "project")
    cache = root / "cache"
    events = []
    report = ptebuild.build(manifest, ptebuild.BuildRequest(cache=str(cache), executor="local", jobs=2),
                            progress=lambda *event: events.append(event))
    assert report.ok, [t.message for t in report.targets]
    assert {t.name: t.status for t in report.targets} == {"tiny_portable": Status.BUILT, "tiny_xnnpack": Status.BUILT}
    assert ("tiny_portable", "done", "built") in events
    return manifest, cache


def test_a_build_returns_a_typed_report(project):
    manifest, cache = project
    report = ptebuild.build(manifest, ptebuild.BuildRequest(cache=str(cache), only=["tiny_xnnpack"], explain=True))
    assert isinstance(report, ptebuild.BuildReport) and report.ok and not report.replayed
    [target] = report.targets
    assert (target.name, target.backend, target.status, target.explain) == (
        "tiny_xnnpack", "xnnpack", Status.CACHED, ["up to date"])
    assert [o.name for o in target.outputs] == ["tiny_xnnpack.pte", "tiny_xnnpack_weights.ptd"]
    assert target.check == "executorch-runtime" and all(f.cosine > 0.999 for f in target.figures)
    assert report.out_dir == manifest.parent / "out"
    assert report.to_json()["targets"][0]["status"] == "cached"


def test_bad_requests_and_manifests_raise_library_errors(project, tmp_path):
    manifest, cache = project
    with pytest.raises(UsageError, match=r"--only: .* has no program 'tiny_xnnpak' \(did you mean 'tiny_xnnpack'\?\)"):
        ptebuild.build(manifest, ptebuild.BuildRequest(cache=str(cache), only=["tiny_xnnpak"]))
    with pytest.raises(UsageError, match="--jobs 0: give at least 1"):
        ptebuild.build(manifest, ptebuild.BuildRequest(jobs=0))
    broken = copy_project(tmp_path / "broken")
    broken.write_text(broken.read_text().replace('backend = "xnnpack"', 'backend = "xnnpak"'))
    with pytest.raises(ManifestError, match=r"programs.tiny_xnnpack.backend: unknown backend 'xnnpak'"):
        ptebuild.build(broken, ptebuild.BuildRequest(no_cache=True))


def test_lock_verify_inspect_and_pack(project, tmp_path):
    manifest, cache = project
    request = ptebuild.BuildRequest(cache=str(cache))
    locked = ptebuild.lock(manifest, request)
    assert locked.path == manifest.parent / "ptebuild.lock" and locked.targets == 2 and not locked.not_built
    again = ptebuild.build(manifest, request.replace(locked=True))
    assert again.ok and again.lock_problems == []
    assert ptebuild.verify(manifest.parent / "out", verify_bytes=True).ok
    inspected = ptebuild.inspect(manifest.parent / "out" / "tiny_xnnpack.pte")
    assert [m.name for m in inspected.methods] == ["forward", "score"]
    with pytest.raises(UsageError, match="cannot read"):
        ptebuild.inspect(tmp_path / "missing.pte")
    bundle = ptebuild.pack(manifest, tmp_path / "tiny.tar.gz")
    assert bundle.targets == ("tiny_portable", "tiny_xnnpack") and ptebuild.verify(tmp_path / "tiny.tar.gz").ok
    with pytest.raises(UsageError, match="--out and --from-cache exclude each other"):
        ptebuild.pack(manifest, tmp_path / "x.zip", out="x", from_cache=True)


def test_importing_ptebuild_imports_no_heavy_module():
    code = ("import sys, ptebuild; ptebuild.BuildRequest(jobs=1); "
            "print(sorted(m for m in ('torch', 'executorch', 'pydantic', 'dataclasses') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
