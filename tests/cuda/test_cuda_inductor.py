"""The CUDA lowering's reproducibility context: Inductor's configuration and patches, restored after."""

from __future__ import annotations

import pytest

from ptebuild.backends import get_backend
from ptebuild.backends.cuda import inductor
from ptebuild.backends.cuda.options import options_model


def test_a_source_date_epoch_of_the_environment_is_kept(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert inductor.reproducible_environment()["SOURCE_DATE_EPOCH"] == "1700000000"
    windows = get_backend("cuda").options_model.model_validate({"platform": "windows", "shim_library": "aoti_cuda_shims"})
    assert get_backend("cuda").toolchain_facts(windows)["cuda.source_date_epoch"] == "1700000000"
    assert "cuda.source_date_epoch" not in get_backend("cuda").toolchain_facts(get_backend("cuda").options_model.model_validate({}))
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    assert inductor.reproducible_environment()["SOURCE_DATE_EPOCH"] == inductor.FIXED_SOURCE_DATE_EPOCH


def test_older_torch_without_deterministic_mode_is_named(monkeypatch):
    import torch._inductor.config as inductor_config

    from ptebuild.errors import BuildError

    assert inductor._has_config(inductor_config, "triton.autotune_pointwise")
    assert not inductor._has_config(inductor_config, "triton.no_such_knob")
    monkeypatch.setattr(inductor, "REPRODUCIBLE_INDUCTOR", {**inductor.REPRODUCIBLE_INDUCTOR, "no_such_knob": True})
    with pytest.raises(BuildError, match=r"lacks Inductor's no_such_knob: .*max_autotune = true"):
        with inductor.reproducible_inductor():
            pass


def test_inductor_cache_stays_put_when_tmpdir_moves(monkeypatch, tmp_path):
    """The .so records paths in Inductor's cache: ``--reproduce`` and CI change $TMPDIR, not them."""
    import os

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    default = inductor.inductor_cache_dir()
    assert default.startswith("/tmp/torchinductor_") and str(tmp_path) not in default
    monkeypatch.delenv("TRITON_DISABLE_LINE_INFO", raising=False)
    with inductor.reproducible_inductor():
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == default
        assert os.environ["TRITON_DISABLE_LINE_INFO"] == "1"  # line tables carry the source's mtime
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ and "TRITON_DISABLE_LINE_INFO" not in os.environ
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "relative/inductor")
    assert inductor.inductor_cache_dir() == os.path.abspath("relative/inductor")


def test_kernels_with_several_configs_take_the_first_working_one(monkeypatch):
    """The timings still rule out configs that fail (inf); the order of the rest is the configs' own."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    measured = {"first": 3.0, "spills": float("inf"), "third": 1.0}
    monkeypatch.setattr(CachingAutotuner, "benchmark_all_configs", lambda self: dict(measured))
    with inductor._first_working_config():
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

    options = options_model()(max_autotune=max_autotune)
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
