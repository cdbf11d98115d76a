"""The CUDA backend's builder-side hooks: cheap, no torch; what this machine can and cannot do."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ptebuild.backends import get_backend
from ptebuild.backends import cuda


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def test_cannot_build_without_a_gpu(no_gpu):
    backend = get_backend("cuda")
    assert backend.can_build() == "built on a machine with a CUDA GPU"
    assert backend.can_check() == "checked on a machine with a CUDA GPU"


def test_cannot_build_here_when_no_gpu_is_visible():
    if cuda.gpu_visible():
        pytest.skip("this machine has a GPU")
    assert get_backend("cuda").can_build() == cuda.NEEDS_GPU


def test_windows_names_the_missing_cross_compiler(monkeypatch, tmp_path):
    monkeypatch.setattr(cuda, "gpu_visible", lambda: True)
    (tmp_path / "g++").symlink_to("/bin/true")
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = get_backend("cuda").can_build({"platform": "windows", "shim_library": "aoti_cuda_shims"})
    assert reason == (
        "x86_64-w64-mingw32-g++ not found: install MinGW-w64 with POSIX threads (Debian: g++-mingw-w64-x86-64-posix)"
    )
    assert get_backend("cuda").can_build({"platform": "linux"}) is None


def test_windows_names_a_missing_cuda_runtime(monkeypatch, tmp_path):
    fake = tmp_path / cuda.MINGW_GXX
    fake.write_text("#!/bin/sh\necho 'Thread model: posix' >&2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.delenv("WINDOWS_CUDA_HOME", raising=False)
    assert cuda.windows_toolchain_problem().startswith("WINDOWS_CUDA_HOME is not set")
    monkeypatch.setenv("WINDOWS_CUDA_HOME", str(tmp_path))
    assert cuda.windows_toolchain_problem() == f"WINDOWS_CUDA_HOME={tmp_path} has no include/cuda_runtime.h"
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda_runtime.h").write_text("")
    assert cuda.windows_toolchain_problem() == f"WINDOWS_CUDA_HOME={tmp_path} has no lib/x64/cudart.lib"
    (tmp_path / "lib" / "x64").mkdir(parents=True)
    (tmp_path / "lib" / "x64" / "cudart.lib").write_text("")
    assert cuda.windows_toolchain_problem().startswith(f"WINDOWS_CUDA_HOME={tmp_path} has no bin/x64/cudart64_*.dll")
    (tmp_path / "bin" / "x86_64").mkdir(parents=True)
    (tmp_path / "bin" / "x86_64" / "cudart64_13.dll").write_text("")  # the PyPI wheel's layout
    assert cuda.windows_toolchain_problem() is None
    fake.write_text("#!/bin/sh\necho 'Thread model: win32' >&2\n")
    assert "win32-threads flavour" in cuda.windows_toolchain_problem()


def test_toolchain_facts_are_cheap_and_follow_the_specs(monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    backend = get_backend("cuda")
    facts = backend.toolchain_facts({"max_autotune": True})
    assert set(facts) == {
        "cuda.torch_build", "cuda.runtime", "cuda.toolkit", "cuda.triton", "cuda.gpu_arch", "cuda.compile_specs"
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
        assert os.environ["SOURCE_DATE_EPOCH"] == (os.environ.get("SOURCE_DATE_EPOCH") if had_epoch else cuda.FIXED_SOURCE_DATE_EPOCH)
    assert inductor_config.deterministic == before
    assert ("SOURCE_DATE_EPOCH" in os.environ) == had_epoch


def test_a_source_date_epoch_of_the_environment_is_kept(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert cuda.reproducible_environment()["SOURCE_DATE_EPOCH"] == "1700000000"
    windows = get_backend("cuda").options_model.model_validate({"platform": "windows", "shim_library": "aoti_cuda_shims"})
    assert get_backend("cuda").toolchain_facts(windows)["cuda.source_date_epoch"] == "1700000000"
    assert "cuda.source_date_epoch" not in get_backend("cuda").toolchain_facts(get_backend("cuda").options_model.model_validate({}))
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    assert cuda.reproducible_environment()["SOURCE_DATE_EPOCH"] == cuda.FIXED_SOURCE_DATE_EPOCH


def test_max_autotune_keeps_inductor_as_executorch_sets_it():
    import torch._inductor.config as inductor_config

    from ptebuild.backends import get_backend

    backend = get_backend("cuda")
    with backend.lowering_context(backend.options_model.model_validate({"max_autotune": True})):
        assert not inductor_config.deterministic


def test_older_torch_without_deterministic_mode_is_named(monkeypatch):
    import torch._inductor.config as inductor_config

    from ptebuild.backends import cuda
    from ptebuild.errors import BuildError

    assert cuda._has_config(inductor_config, "triton.autotune_pointwise")
    assert not cuda._has_config(inductor_config, "triton.no_such_knob")
    monkeypatch.setattr(cuda, "REPRODUCIBLE_INDUCTOR", {**cuda.REPRODUCIBLE_INDUCTOR, "no_such_knob": True})
    with pytest.raises(BuildError, match=r"lacks Inductor's no_such_knob: .*max_autotune = true"):
        with cuda.reproducible_inductor():
            pass


def test_inductor_cache_stays_put_when_tmpdir_moves(monkeypatch, tmp_path):
    """The .so records paths in Inductor's cache: ``--check`` and CI change $TMPDIR, not them."""
    import os

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    default = cuda.inductor_cache_dir()
    assert default.startswith("/tmp/torchinductor_") and str(tmp_path) not in default
    monkeypatch.delenv("TRITON_DISABLE_LINE_INFO", raising=False)
    with cuda.reproducible_inductor():
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == default
        assert os.environ["TRITON_DISABLE_LINE_INFO"] == "1"  # line tables carry the source's mtime
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ and "TRITON_DISABLE_LINE_INFO" not in os.environ
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "relative/inductor")
    assert cuda.inductor_cache_dir() == os.path.abspath("relative/inductor")


def test_kernels_with_several_configs_take_the_first_working_one(monkeypatch):
    """The timings still rule out configs that fail (inf); the order of the rest is the configs' own."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    measured = {"first": 3.0, "spills": float("inf"), "third": 1.0}
    monkeypatch.setattr(CachingAutotuner, "benchmark_all_configs", lambda self: dict(measured))
    with cuda._first_working_config():
        timings = CachingAutotuner.benchmark_all_configs(None)
    assert min(timings, key=timings.get) == "first"
    assert timings == {"first": 0.0, "spills": float("inf"), "third": 2.0}
    assert CachingAutotuner.benchmark_all_configs(None) == measured  # restored


@pytest.mark.parametrize("max_autotune", [False, True])
def test_wrapper_declares_every_int_array_it_hands_out(max_autotune):
    """Inductor keys its reuse of declared size/stride arrays by ``id()`` of a short-lived
    writer: a new writer at a freed one's address got the old variable and no declaration (on
    the H200 this made two cold builds differ). Under the lowering context, every writer that
    is handed a variable has declared it itself."""
    import torch
    from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
    from torch._inductor.graph import GraphLowering
    from torch._inductor.utils import IndentedBuffer
    from torch._inductor.virtualized import V

    options = cuda.options_model()(max_autotune=max_autotune)
    graph = GraphLowering(torch.fx.symbolic_trace(torch.nn.ReLU()), aot_mode=True, cpp_wrapper=True)
    undeclared = []
    with get_backend("cuda").lowering_context(options), V.set_graph_handler(graph):
        wrapper = CppWrapperCpu()
        for attempt in range(50):  # freed writers' addresses come back within a few tries
            writer = IndentedBuffer()
            name = wrapper.codegen_int_array_var("{2L, 3L}", writer.writeline, graph=graph)
            if f"{name}[]" not in writer.getvalue():
                undeclared.append((attempt, name))
            del writer
    assert undeclared == []
    assert not hasattr(CppWrapperCpu.codegen_int_array_var, "__wrapped__")  # restored
