"""On the GPU machine: CUDA programs checked as ExecuTorch's runtime would run them, every output
slot the ``.pte`` declares against eager PyTorch; what would crash on the device refused first."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from gpu_build import build_cli

    project = tmp_path_factory.mktemp("people-cuda")
    shutil.copy(HERE / "people_cuda.toml", project / "people_cuda.toml")
    shutil.copytree(HERE / "cudamodels", project / "cudamodels", ignore=shutil.ignore_patterns("__pycache__"))
    done = build_cli(project / "people_cuda.toml", project / "out", project / "cache", "--keep-going", "--jobs", "4")
    programs = {p["name"]: p for p in done["report"]["targets"]}
    return project, done, programs


def test_aliased_and_strided_outputs_are_made_safe_and_checked(built):
    from ptebuild.backends.cuda.check import declared_outputs

    project, _, programs = built
    aliased = programs["aliased_cuda"]
    assert aliased["status"] == "built", aliased.get("message")
    assert declared_outputs(project / "out" / "aliased_cuda.pte") == {"forward": 4}
    assert {f["output"] for f in aliased["figures"]} == {0, 1, 2, 3}
    assert aliased["check"] == "aoti-runner-cuda"


def test_a_nested_state_is_checked_leaf_by_leaf(built):
    _, _, programs = built
    recurrent = programs["recurrent_cuda"]
    assert recurrent["status"] == "built", recurrent.get("message")
    assert {(f["output"], f["sizes"]["batch"]) for f in recurrent["figures"]} == {(o, b) for o in (0, 1) for b in (1, 2, 4)}


def test_a_shim_the_runtime_lacks_is_refused_in_one_line(built):
    """Inductor writes a scatter with a fallback call (refused: the shim is not in ExecuTorch 1.5's
    CUDA runtime) or as a Triton kernel (built: then its code calls no shim the runtime lacks).
    Which one torch 2.11's Inductor does is what this run reports."""
    from ptebuild.backends.cuda.delegates import read_cuda_delegates, read_pte_named_data
    from ptebuild.backends.cuda.runtime_shims import missing_shims, supported_fallback_kernels, undefined_symbols

    project, _, programs = built
    scatter = programs["scatter_cuda"]
    if scatter["status"] == "built":
        pte = project / "out" / "scatter_cuda.pte"
        (delegate,) = read_cuda_delegates(pte)
        so = read_pte_named_data(pte, delegate.payload.so_blob_key)
        assert missing_shims(undefined_symbols(so), supported_fallback_kernels()) == []
        return
    assert scatter["status"] == "failed"
    assert "calls C shims that ExecuTorch 1.5.1's CUDA runtime does not define: aoti_torch_" in scatter["message"]
    assert "\n" not in scatter["message"]


def test_a_missing_kernel_is_named(built):
    _, _, programs = built
    resize = programs["resize_cuda"]
    assert resize["status"] == "failed"
    assert "missing fallback kernels (1 total): " in resize["message"] and "upsample_bilinear2d_aa" in resize["message"]
    assert "(full output: " in resize["message"]
    lstm = programs["lstm_cuda"]
    assert lstm["status"] == "failed" and "_thnn_fused_lstm_cell" in lstm["message"]


def test_doctor_says_what_the_gpu_machine_can_do(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "ptebuild", "doctor", "--json", "--cache", str(tmp_path)],
                          capture_output=True, text=True, check=True)
    rows = {row["backend"]: row for row in json.loads(done.stdout)["backends"]}
    assert rows["cuda"]["lower"] is True and rows["cuda"]["check"] is True
