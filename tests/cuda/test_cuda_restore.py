"""A machine without a GPU restores CUDA programs that a GPU machine put in the shared cache.

The GPU machine's side is its real output (``data/``, built on an H200) saved through the real
cache front end exactly as its builder saves a result: under its own key, and under the key
without the toolchain that a CPU machine looks it up by. The CPU side is a real ``ptebuild build``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import ptebuild

from ptebuild.builder import keys
from ptebuild.figures import read_figures
from ptebuild.hashing import hash_file
from ptebuild.manifest.load import load_manifest
from ptebuild.results import ActionResult, OutputFile
from ptebuild.store import Store
from ptebuild.store.frontend import Cache
from ptebuild.store.local import LocalTier

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"


@pytest.fixture
def project(tmp_path):
    shutil.copy(HERE / "tiny_cuda.toml", tmp_path / "tiny_cuda.toml")
    shutil.copytree(HERE / "cudamodels", tmp_path / "cudamodels", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "tiny_cuda.toml"


def save_as_the_gpu_machine_did(manifest: Path, cache: Path) -> ActionResult:
    """Program tiny_cuda_a as the H200 built it, in the cache the CPU machine shares."""
    facts = json.loads((DATA / "MANIFEST.json").read_text())
    plan = load_manifest(str(manifest))
    program = next(p for p in plan.programs if p.name == "tiny_cuda_a")
    inputs = keys.program_inputs(program, plan, hash_file)
    inputs = {k: v for k, v in inputs.items() if not k.startswith("toolchain.cuda.")}
    inputs["toolchain.torch"] = facts["torch"]
    inputs.update({f"toolchain.{k}": v for k, v in facts["toolchain"].items()})
    files = {name: DATA / name for name in ("tiny_cuda_a.pte", "tiny_cuda_a_weights.ptd")}
    result = ActionResult(
        key=keys.action_key(inputs), target="tiny_cuda_a", kind="program", backend="cuda",
        outputs=tuple(OutputFile(n, *hash_file(p)) for n, p in sorted(files.items())),
        inputs=inputs, figures=tuple(read_figures(f) for f in facts["programs"]["tiny_cuda_a"]["figures"]), check="aoti-runner-cuda",
        built_on="gpu-host",
    )
    tier = LocalTier(Store(cache))
    Cache([tier], lambda text: None).save(result, files, aliases=(keys.elsewhere_key(inputs),))
    tier.close()
    return result


def test_cpu_build_restores_what_the_gpu_machine_built(project, tmp_path):
    cache = tmp_path / "cache"
    built = save_as_the_gpu_machine_did(project, cache)
    result = ptebuild("build", str(project), "--cache", str(cache), "--only", "tiny_cuda_a", "--json", "--explain")
    assert result.returncode == 0, result.stderr
    program = json.loads(result.stdout)["targets"][0]
    assert program["status"] == "cached" and program["key"] == built.key
    assert program["check"] == "aoti-runner-cuda" and program["node"] == "gpu-host"
    assert "built on gpu-host (" in program["explain"][0] and "torch 2.11.0+cu130" in program["explain"][0]
    out = project.parent / "out"
    assert (out / "tiny_cuda_a.pte").read_bytes() == (DATA / "tiny_cuda_a.pte").read_bytes()
    verify = ptebuild("verify", str(out), "--bytes")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_an_edited_model_is_not_restored_from_another_machine(project, tmp_path):
    cache = tmp_path / "cache"
    save_as_the_gpu_machine_did(project, cache)
    source = project.parent / "cudamodels" / "tiny.py"
    source.write_text(source.read_text() + "\n# edited after the GPU build\n")
    result = ptebuild("build", str(project), "--cache", str(cache), "--only", "tiny_cuda_a", "--json")
    assert result.returncode == 1
    program = json.loads(result.stdout)["targets"][0]
    assert program["status"] == "needs-gpu"


def test_uncached_cuda_program_needs_a_gpu_and_skip_backend_leaves_it_out(project, tmp_path):
    result = ptebuild("build", str(project), "--cache", str(tmp_path / "cache"), "--json")
    assert result.returncode == 1
    document = json.loads(result.stdout)
    assert {p["status"] for p in document["targets"]} == {"needs-gpu"}
    error = next(line for line in result.stderr.splitlines() if "tiny_cuda_a" in line)
    assert error.startswith(f"error: {project}: programs.tiny_cuda_a: not in the cache, and this machine cannot build it:")
    assert "--skip-backend cuda" in error
    skipped = ptebuild("build", str(project), "--cache", str(tmp_path / "cache"), "--skip-backend", "cuda", "--json")
    assert skipped.returncode == 0 and json.loads(skipped.stdout)["targets"] == []
