"""On the GPU machine: lower the tiny CUDA programs, check them on the GPU, pair their files."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptebuild.backends.cuda.delegates import read_cuda_delegates
from ptebuild.errors import LoadError
from ptebuild.runtime import check

HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from gpu_build import build_direct

    out = tmp_path_factory.mktemp("tiny-cuda")
    return out, build_direct(HERE / "tiny_cuda.toml", out)


def test_can_build_here():
    from ptebuild.backends import get_backend

    assert get_backend("cuda").can_build() is None


def test_checked_on_the_gpu_at_every_size(built):
    _, results = built
    for name in ("tiny_cuda_a", "tiny_cuda_b"):
        result = results[name]
        assert result["check"] == "aoti-runner-cuda"
        assert {tuple(sorted(f["sizes"].items())) for f in result["figures"]} == {
            (("batch", 2),), (("batch", 1),), (("batch", 4),)
        }
        assert all(f["max_abs_error"] < 1e-4 and f["cosine"] > 0.9999 for f in result["figures"])


def test_weights_go_to_the_data_name(built):
    out, results = built
    assert set(results["tiny_cuda_a"]["files"]) == {"tiny_cuda_a.pte", "tiny_cuda_a_weights.ptd"}
    assert not (out / "aoti_cuda_blob.ptd").exists()


def test_keys_carry_sha256_and_pairs_are_checked(built):
    out, _ = built
    (delegate,) = read_cuda_delegates(out / "tiny_cuda_a.pte")
    assert delegate.payload.weights and all("@sha256:" in w.storage_key for w in delegate.payload.weights)
    check(out / "tiny_cuda_a.pte", [out / "tiny_cuda_a_weights.ptd"], verify_bytes=True)
    with pytest.raises(LoadError, match=r"needs key 'cuda_fqn_weight:cuda:.*@sha256:"):
        check(out / "tiny_cuda_a.pte", [out / "tiny_cuda_b_weights.ptd"])


@pytest.fixture(scope="module")
def twice(tmp_path_factory) -> dict:
    """tiny_cuda_a lowered twice in fresh processes, Inductor's and Triton's caches emptied at one
    path before each (two machines of one kind), with two PYTHONHASHSEEDs."""
    import json
    import subprocess
    import sys

    probe = tmp_path_factory.mktemp("repro") / "probe.json"
    subprocess.run(
        [sys.executable, str(HERE / "repro_probe.py"), str(probe), "--same-path", "--seeds", "0,12345"], check=True
    )
    return json.loads(probe.read_text())


def test_weights_file_is_reproducible(twice):
    first, second = twice["runs"]
    assert first["files"]["tiny_cuda_a_weights.ptd"] == second["files"]["tiny_cuda_a_weights.ptd"]


def test_program_is_reproducible(twice):
    """max_autotune off (the default): no measured time picks a kernel, no line table records a
    file's time, so the ``.so`` and the ``.pte`` repeat byte for byte."""
    assert twice["byte_identical"], twice["differing_sections"]
    assert twice["differing_sections"] == {}
