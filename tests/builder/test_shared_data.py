"""Shared weights files: two programs, one data name, one .ptd, loaded by ExecuTorch with each."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import ptebuild
from project_copy import copy_project

TOOLS_ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    root = tmp_path_factory.mktemp("shared")
    manifest = copy_project(root / "project")
    text = manifest.read_text()
    manifest.write_text(text.replace("tiny_portable_weights", "tiny_weights").replace("tiny_xnnpack_weights", "tiny_weights"))
    cache = root / "cache"
    result = ptebuild("build", str(manifest), "--cache", str(cache), "--json")
    assert result.returncode == 0, result.stderr
    return manifest, cache, json.loads(result.stdout)


def test_one_weights_file_serves_both_programs_in_executorch(shared):
    manifest, _, document = shared
    out = manifest.parent / "out"
    assert sorted(p.name for p in out.iterdir()) == ["ptebuild.json", "tiny_portable.pte", "tiny_weights.ptd", "tiny_xnnpack.pte"]
    for program in document["targets"]:
        assert program["status"] == "built"
        assert [o["path"] for o in program["outputs"] if o["path"].endswith(".ptd")] == [str(out / "tiny_weights.ptd")]
    code = f"""
import sys, torch
sys.path.insert(0, {str(manifest.parent)!r})
from executorch.runtime import Runtime
from tinymodels.tiny import make_tiny
torch.manual_seed(1)
model = make_tiny(width=16).eval()
x = torch.randn(3, 6)
for name in ("tiny_portable", "tiny_xnnpack"):
    program = Runtime.get().load_program({str(out)!r} + f"/{{name}}.pte", data_path={str(out / "tiny_weights.ptd")!r})
    assert torch.allclose(program.load_method("forward").execute([x])[0], model(x), atol=1e-5), name
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=TOOLS_ENV)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]
    verify = ptebuild("verify", str(out), "--bytes")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_shared_file_is_smaller_than_the_two_and_a_noop_keeps_it(shared):
    manifest, cache, _document = shared
    out = manifest.parent / "out"
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.iterdir()}
    again = ptebuild("build", str(manifest), "--cache", str(cache), "--json")
    assert {p["status"] for p in json.loads(again.stdout)["targets"]} == {"cached"}
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.iterdir()} == before
    # Removed: restored whole from the cache, byte for byte.
    data = (out / "tiny_weights.ptd").read_bytes()
    (out / "tiny_weights.ptd").unlink()
    assert ptebuild("build", str(manifest), "--cache", str(cache)).returncode == 0
    assert (out / "tiny_weights.ptd").read_bytes() == data


def test_only_one_program_of_a_group_builds_the_whole_group(shared, tmp_path):
    manifest, cache, _ = shared
    document = json.loads(ptebuild("build", str(manifest), "--cache", str(cache), "--only", "tiny_portable", "--json").stdout)
    assert sorted(p["name"] for p in document["targets"]) == ["tiny_portable", "tiny_xnnpack"]


@pytest.mark.slow
def test_a_member_that_bundles_its_test_cases_publishes_its_bpte(shared, tmp_path):
    """bundle_io on one program of a shared data name: its .bpte is published with its .pte, and
    ExecuTorch verifies it with the shared weights file."""
    import shutil
    from pathlib import Path

    manifest, cache, _document = shared
    project = Path(shutil.copytree(manifest.parent, tmp_path / "project", ignore=shutil.ignore_patterns("out")))
    copy = project / manifest.name
    copy.write_text(copy.read_text().replace('backend = "xnnpack"\n', 'backend = "xnnpack"\nbundle_io = true\n'))
    result = ptebuild("build", str(copy), "--cache", str(cache), "--json")
    assert result.returncode == 0, result.stderr
    statuses = {p["name"]: p["status"] for p in json.loads(result.stdout)["targets"]}
    assert statuses == {"tiny_portable": "cached", "tiny_xnnpack": "built"}
    out = project / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "ptebuild.json", "tiny_portable.pte", "tiny_weights.ptd", "tiny_xnnpack.bpte", "tiny_xnnpack.pte"]
    record = json.loads((out / "ptebuild.json").read_text())
    assert sorted(record["targets"]["tiny_xnnpack"]["outputs"]) == ["tiny_weights.ptd", "tiny_xnnpack.bpte", "tiny_xnnpack.pte"]
    assert ptebuild("verify", str(out), "--bytes").returncode == 0
    verify = Path(__file__).resolve().parents[1] / "lowering" / "bpte_verify.py"
    done = subprocess.run([sys.executable, str(verify), str(out / "tiny_xnnpack.bpte"), str(out / "tiny_weights.ptd"), "--atol", "1e-6"],
                          capture_output=True, text=True, env=TOOLS_ENV, timeout=300)
    assert done.returncode == 0 and done.stdout.count(": ok (") == 6, done.stdout + done.stderr[-3000:]
