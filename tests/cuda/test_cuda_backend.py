"""The CUDA backend's builder-side hooks: cheap, no torch; what this machine can and cannot do."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ptebuild.backends import cuda, get_backend
from ptebuild.backends.cuda import inductor, toolchain


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def test_cannot_build_without_a_gpu(no_gpu):
    backend = get_backend("cuda")
    assert backend.can_build() == "built on a machine with a CUDA GPU"
    assert backend.can_check() == "checked on a machine with a CUDA GPU"


def test_cannot_build_here_when_no_gpu_is_visible():
    if toolchain.gpu_visible():
        pytest.skip("this machine has a GPU")
    assert get_backend("cuda").can_build() == cuda.NEEDS_GPU


def test_windows_names_the_missing_cross_compiler(monkeypatch, tmp_path):
    monkeypatch.setattr(toolchain, "gpu_visible", lambda: True)
    (tmp_path / "g++").symlink_to("/bin/true")
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = get_backend("cuda").can_build({"platform": "windows", "shim_library": "aoti_cuda_shims"})
    assert reason == (
        "x86_64-w64-mingw32-g++ not found: install MinGW-w64 with POSIX threads (Debian: g++-mingw-w64-x86-64-posix)"
    )
    assert get_backend("cuda").can_build({"platform": "linux"}) is None


def test_toolchain_facts_are_cheap_and_follow_the_specs(monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    backend = get_backend("cuda")
    facts = backend.toolchain_facts({"max_autotune": True})
    assert set(facts) == {
        "cuda.torch_build", "cuda.runtime", "cuda.toolkit", "cuda.triton", "cuda.gpu_arch", "cuda.compile_specs",
        "cuda.fixes",  # the known-limit fixes ptebuild applies (backends/cuda/conv_transpose.py)
    }
    assert facts["cuda.gpu_arch"] == "9.0"
    assert json.loads(facts["cuda.compile_specs"])["max_autotune"] == "ON"
    model = backend.options_model.model_validate({"max_autotune": True})
    assert backend.toolchain_facts(model) == facts
    assert backend.toolchain_facts({}) != facts  # the default: off
    assert backend.resources({}) == {"num_gpus": 1}


def test_builder_side_hooks_import_no_torch():
    code = (
        "import sys; from ptebuild.backends import get_backend; b = get_backend('cuda'); "
        "b.can_build(); b.can_build({'platform': 'windows'}); b.toolchain_facts({}); b.resources({}); "
        "assert 'torch' not in sys.modules and 'executorch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_reproducible_mode_is_on_only_during_lowering():
    """max_autotune off: Inductor's deterministic mode, Triton GEMM templates, one pointwise config."""
    import torch._inductor.config as inductor_config

    from ptebuild.backends import get_backend

    backend = get_backend("cuda")
    options = backend.options_model.model_validate({})
    before = inductor_config.deterministic
    had_epoch = "SOURCE_DATE_EPOCH" in os.environ
    with backend.lowering_context(options):
        assert inductor_config.deterministic and inductor_config.max_autotune_gemm
        assert not inductor_config.triton.autotune_pointwise
        assert os.environ["SOURCE_DATE_EPOCH"] == (os.environ.get("SOURCE_DATE_EPOCH") if had_epoch else inductor.FIXED_SOURCE_DATE_EPOCH)
    assert inductor_config.deterministic == before
    assert ("SOURCE_DATE_EPOCH" in os.environ) == had_epoch


def test_max_autotune_keeps_inductor_as_executorch_sets_it():
    import torch._inductor.config as inductor_config

    from ptebuild.backends import get_backend

    backend = get_backend("cuda")
    with backend.lowering_context(backend.options_model.model_validate({"max_autotune": True})):
        assert not inductor_config.deterministic


def test_outputs_are_put_in_slot_order_by_the_values_the_pte_names():
    """The compiled code returns ``c`` before ``h`` while the method returns ``{"h", "c"}``: seen
    on the H200 (a hand-written recurrent cell), where comparing in the code's order failed a
    correct program."""
    from ptebuild.backends.cuda.check import slot_outputs
    from ptebuild.errors import BuildError

    # Delegate call: inputs are values 0 and 1, outputs values 7 then 5; the method's slots: 5, 7.
    assert slot_outputs(["c", "h"], (0, 1, 7, 5), (5, 7), "method 'forward'", "p") == ["h", "c"]
    assert slot_outputs(["y"], (0, 3), (3, 3), "method 'forward'", "p") == ["y", "y"]
    with pytest.raises(BuildError, match=r"output slot 1 is not computed by the CUDA delegate \(value 0\)"):
        slot_outputs(["y"], (0, 3), (3, 0), "method 'forward'", "p")


def test_the_committed_program_names_its_delegate_outputs():
    """On the GPU-built test program: one delegate call per method whose last arguments are the
    method's outputs."""
    from pathlib import Path

    from ptebuild.backends.cuda.check import declared_outputs, delegate_calls

    pte = Path(__file__).parent / "data" / "tiny_cuda_a.pte"
    calls = delegate_calls(pte)
    assert set(calls) == set(declared_outputs(pte))
    for args, slots in calls.values():
        assert set(slots) <= set(args[len(args) - len(slots):])
