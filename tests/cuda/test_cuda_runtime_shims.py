"""The C shims a CUDA program's compiled code calls, against what ExecuTorch 1.5's CUDA runtime
defines: read from real ELF files (the committed H200 program, and a library gcc builds here)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import unavailable

from ptebuild.backends.cuda.check import declared_outputs
from ptebuild.backends.cuda.delegates import read_cuda_delegates, read_pte_named_data
from ptebuild.backends.cuda.runtime_shims import (
    MISSING_BEFORE_1_6,
    applies,
    check_program_shims,
    missing_shims,
    undefined_symbols,
)
from ptebuild.errors import BuildError

DATA = Path(__file__).resolve().parent / "data"
# ExecuTorch 1.5.1's CudaBackend.get_supported_fallback_kernels() (its module needs Triton to import).
SUPPORTED_1_5_1 = {
    "at::_ops::_weight_int4pack_mm::call", "aoti_torch_cuda__weight_int4pack_mm", "at::_ops::sort_stable::call",
    "aoti_torch_cuda_sort_stable", "aoti_torch_cuda_randint_low_out", "aoti_torch_cuda_int4_plain_mm",
    "aoti_torch_cuda_int5_plain_mm", "aoti_torch_cuda_int6_plain_mm", "aoti_torch_cuda_int8_plain_mm",
}


def test_the_h200_program_calls_only_shims_the_runtime_defines():
    pte = DATA / "tiny_cuda_a.pte"
    (delegate,) = read_cuda_delegates(pte)
    symbols = undefined_symbols(read_pte_named_data(pte, delegate.payload.so_blob_key))
    assert {"aoti_torch_empty_strided", "aoti_torch_create_cuda_stream_guard"} <= symbols
    assert missing_shims(symbols, SUPPORTED_1_5_1) == []
    check_program_shims(pte, "tiny_cuda_a", SUPPORTED_1_5_1)
    assert declared_outputs(pte) == {"forward": 1}


def test_kernels_and_shims_the_runtime_lacks_are_named():
    symbols = {"aoti_torch_cuda_scatter_src_out", "aoti_torch_index_put_out", "aoti_torch_cuda_sort_stable",
               "aoti_torch_cuda_guard_set_index", "aoti_torch_item_float16", "cudaMalloc"}
    assert missing_shims(symbols, SUPPORTED_1_5_1) == [
        "aoti_torch_cuda_scatter_src_out", "aoti_torch_index_put_out", "aoti_torch_item_float16"
    ]
    assert "aoti_torch_cuda_index_Tensor" in MISSING_BEFORE_1_6
    assert applies("1.5.1") and not applies("1.6.0")


def test_undefined_symbols_of_a_real_shared_object(tmp_path):
    gcc = shutil.which("gcc")
    if gcc is None:
        unavailable("gcc is not installed: it builds the test's shared object")
    source = tmp_path / "wrapper.c"
    source.write_text(
        "int aoti_torch_cuda_scatter_src_out(void *);\nint aoti_torch_empty_strided(void);\n"
        "int run(void *x) { return aoti_torch_cuda_scatter_src_out(x) + aoti_torch_empty_strided(); }\n"
    )
    so = tmp_path / "wrapper.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(so), str(source)], check=True)
    symbols = undefined_symbols(so.read_bytes())
    assert {"aoti_torch_cuda_scatter_src_out", "aoti_torch_empty_strided"} <= symbols and "run" not in symbols
    assert missing_shims(symbols, SUPPORTED_1_5_1) == ["aoti_torch_cuda_scatter_src_out"]


def test_the_refusal_names_method_shims_and_fix(tmp_path, monkeypatch):
    from ptebuild.backends.cuda import runtime_shims

    monkeypatch.setattr(runtime_shims, "missing_shims", lambda symbols, supported: ["aoti_torch_cuda_scatter_src_out"])
    with pytest.raises(BuildError) as caught:
        check_program_shims(DATA / "tiny_cuda_a.pte", "tiny_cuda_a", SUPPORTED_1_5_1)
    assert str(caught.value).startswith(
        "programs.tiny_cuda_a: method 'forward' calls C shims that ExecuTorch 1.5.1's CUDA runtime does not "
        "define: aoti_torch_cuda_scatter_src_out; it would crash at its first call on the device"
    )
