"""``ptebuild inspect``'s text (ptebuild.runtime.inspection_text): the summary and ``--full`` lines
of the committed CUDA program and its ``.ptd`` (``tests/cuda/data``, read without torch), alone
and beside a build record that names their inputs, dims and delegation; and, on inspections built
here, what that program does not have: a language model's metadata method and KV cache, a method
without delegates, inline payloads, unused segments, operators never called, notes."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from ptebuild.insight.delegation import DelegateShare, Delegation, MethodDelegation
from ptebuild.insight.file_insight import FileInsight
from ptebuild.insight.program import ProgramInsight
from ptebuild.runtime.declared import DeclaredInput, DeclaredProgram, declared_program
from ptebuild.runtime.inspect import inspect
from ptebuild.runtime.inspection import BufferSpec, DataKey, DelegateInfo, MethodInfo, PtdInspection, PteInspection, SegmentInfo, ValueSpec
from ptebuild.runtime.inspection_text import PTE_SECTIONS, describe, summary
from ptebuild.runtime.record import RecordEntry, update_record
from ptebuild.sizes import format_size

DATA = Path(__file__).resolve().parents[1] / "cuda" / "data"
PTE = DATA / "tiny_cuda_a.pte"
PTD = DATA / "tiny_cuda_a_weights.ptd"
SO_KEY = "ec2bdbd0013ab438dd71c142e5ee61529658e69d7cdb9d9a9673005243f7b636_so_blob"
SO_SIZE = format_size(2313656)
"""The compiled AOTInductor library's named-data entry (``--full`` lists its segment)."""
WEIGHT_KEYS = [
    "cuda_fqn_weight:cuda:model.hidden.bias@sha256:6d75e3c44979dd4cf1ef4e933f2475711dd6cfadcbbb0011d74da27b5a81a20b",
    "cuda_fqn_weight:cuda:model.hidden.weight@sha256:dcf68191258349927e3d83a4c0941dbc842da357f7d741dc7d40c3cb4f723a46",
    "cuda_fqn_weight:cuda:model.out.weight@sha256:3f08142c91233343932f3394ee287ef81cb8ae983619551ac3cf98139f3eafb3",
]


def size_line(path: Path) -> str:
    split = inspect(path).insight.insight.size
    return f"size: {format_size(split.pte)}: " + ", ".join(f"{label} {format_size(n)}" for label, n in split.pte_parts())


# -- the committed program ----------------------------------------------------------------------


def test_a_cuda_programs_compiled_library_is_code_not_weights():
    """Seen on the GPU host: ``inspect`` said '2.4 MiB weights inside' of a CUDA program whose
    weights are in its .ptd; the 2.4 MiB was its compiled library."""
    split = inspect(PTE).insight.insight.size
    assert (split.code, split.named_data) == (2313656, 0)
    assert ("compiled code", 2313656) in split.pte_parts() and sum(n for _, n in split.pte_parts()) == PTE.stat().st_size


def test_the_summary_of_a_program_alone():
    """Away from any build record: what the file alone knows (inputs by their upper bounds)."""
    assert summary(inspect(PTE)) == [
        f"{PTE}: ExecuTorch program, {format_size(PTE.stat().st_size)}, 1 method",
        "  forward(float32 up to [4, 8]) -> float32 up to [4, 4]",
        "    delegated: 1 of 3 calls (CudaBackend)",
        size_line(PTE),
        "planned memory: forward 256 B",
        f"weights: 3 keys needed from a .ptd; 0 tensors or blobs inside the .pte; its compiled code ({SO_SIZE}) inside the .pte",
        f"(every segment, key and operator: ptebuild inspect --full {PTE})",
    ]


@pytest.fixture
def recorded(tmp_path) -> Path:
    """The program and its .ptd in a folder of their own, with the build record that wrote them:
    the manifest's input name and dims, and the delegation its build counted."""
    out = tmp_path / "out"
    out.mkdir()
    for f in (PTE, PTD):
        shutil.copyfile(f, out / f.name)
    inputs = {
        "manifest.model.dims.batch.min": "1",
        "manifest.model.dims.batch.max": "4",
        "manifest.model.methods.forward.inputs": json.dumps([{"name": "x", "shape": ["batch", 8], "dtype": "float32"}]),
    }
    delegation = {"methods": {"forward": {
        "delegated": {"CudaBackend": {"subgraphs": 1, "operators": {"aten_linear_default": 2, "aten_relu_default": 1}}},
        "non_delegated": {"aten_tanh_default": 1, "getitem": 2},
    }}}
    outputs = tuple((f.name, hashlib.sha256(f.read_bytes()).hexdigest(), f.stat().st_size) for f in (PTE, PTD))
    entry = RecordEntry("program", "../tiny_cuda.toml", "k", outputs, inputs=inputs, backend="cuda",
                        data_name="tiny_cuda_a_weights", methods=("forward",), insight={"delegation": delegation})
    update_record(out, "../tiny_cuda.toml", {"tiny_cuda_a": entry})
    return out


def test_the_summary_beside_its_build_record(recorded):
    """Inputs by the manifest's names, dynamic dims as ranges, the delegated share of operators
    the build counted and what it left to kernels (a tuple access runs none), the .ptd by name."""
    pte = recorded / PTE.name
    lines = summary(inspect(pte), declared_program(pte))
    assert lines == [
        f"{pte}: ExecuTorch program, {format_size(PTE.stat().st_size)}, 1 method, program tiny_cuda_a (per ptebuild.json)",
        "  forward(x: float32[batch, 8]) -> float32 up to [4, 4]",
        "    batch 1..4; delegated: 75.0% of its operators, in 1 of 3 calls (CudaBackend)",
        "left to kernels in forward: aten_tanh_default ×1",
        size_line(pte),
        "planned memory: forward 256 B",
        f"weights: 3 keys needed from tiny_cuda_a_weights.ptd ({format_size(PTD.stat().st_size)}); 0 tensors or blobs inside "
        f"the .pte; its compiled code ({SO_SIZE}) inside the .pte",
        f"(every segment, key and operator: ptebuild inspect --full {pte})",
    ]


def test_the_summary_of_a_data_file(recorded):
    assert summary(inspect(PTD)) == [
        f"{PTD}: ExecuTorch data file, {format_size(1536)}",
        "weights: 3 keys, 832 B",
        f"(every key: ptebuild inspect --full {PTD})",
    ]
    ptd = recorded / PTD.name
    assert summary(inspect(ptd), declared_program(ptd))[0] == (
        f"{ptd}: ExecuTorch data file, {format_size(1536)}, weights of tiny_cuda_a (per ptebuild.json)")


def test_every_part_of_the_program():
    assert describe(inspect(PTE)) == [
        f"{PTE}: ExecuTorch program (ET12), 2316344 bytes, version 0",
        "header: program 1864 bytes, segment data at 1920 (2314424 bytes)",
        "method forward: 4 values, 3 instructions",
        "  inputs:  float32[4, 8] (dynamic-bound)",
        "  outputs: float32[4, 4] (dynamic-bound)",
        "  operators: et_copy::_h2d_copy.out, et_copy::_d2h_copy.out",
        "  delegated: 1 of 3 calls (CudaBackend); 2 operator calls outside",
        "  delegate 0: CudaBackend, segment 1, 661 bytes, 4 keys",
        "segments: 3",
        "  0: [1920, +0) constant tensors",
        "  1: [1920, +661) method 'forward' delegate 0 (CudaBackend)",
        f"  2: [2688, +2313656) named data {SO_KEY!r}",
        "named data: 1",
        f"  {SO_KEY}  2313656 bytes  segment 2",
        "needs from a .ptd: 3 keys",
        *(f"  {key}" for key in WEIGHT_KEYS),
        "operators for a selective runtime build: 2 (delegated calls not listed)",
        "  et_copy::_d2h_copy.out  v1/6;0,1|6;0,1|6;0,1",
        "  et_copy::_h2d_copy.out  v1/6;0,1|6;0,1|6;0,1",
        *inspect(PTE).insight.describe(),
    ]


def test_every_key_of_the_data_file():
    assert describe(inspect(PTD)) == [
        f"{PTD}: ExecuTorch data file (FT01), 1536 bytes, version 0",
        "header: flatbuffer [48, +544), segment data at 640 (896 bytes)",
        "keys: 3 in 3 segments",
        f"  {WEIGHT_KEYS[0]}  64 bytes  segment 1",
        f"  {WEIGHT_KEYS[1]}  512 bytes  segment 0",
        f"  {WEIGHT_KEYS[2]}  256 bytes  segment 2",
    ]


# -- what that program does not have ------------------------------------------------------------


def tensor(index: int, dtype: str, *sizes: int, dynamism: str = "static") -> ValueSpec:
    return ValueSpec(index, "Tensor", dtype, sizes, dynamism)


METADATA = MethodInfo("get_max_seq_len", (), (ValueSpec(0, "Int"),), (), (), 1, 0, "0" * 64, returns_constant=True, constant=128)
DECODER = MethodInfo(
    "forward", (tensor(0, "int64", 1, 8, dynamism="dynamic-bound"), ValueSpec(1, "Int")), (tensor(9, "float32", 1, 8, 32),),
    ("aten::mm.out", "aten::add.out"), (), 10, 14, "1" * 64, kernel_calls=12,
    mutable_buffers=(BufferSpec(3, "float32", (1, 8, 16), "layers.0.k_cache"), BufferSpec(4, "float16", (2,))),
)
INLINE = DelegateInfo(0, "VulkanBackend", "inline", 0, None, 300, "2" * 64, summary="2 shaders, 1 input, 1 output")


def language_model(**changes) -> PteInspection:
    values = {
        "path": Path("llm.pte"), "size": 4096, "header": {"extended_header": False}, "version": 0,
        "methods": (METADATA, DECODER), "segments": (SegmentInfo(0, 64, 16, "3" * 64),),
        "named_data": (), "constant_buffers": ("4" * 64, "5" * 64), "needs": (),
        "notes": ("cannot read method 'forward' delegate 0: truncated",),
        "kernels": {"aten::add.out": ("v1/6;0,1",), "aten::mm.out": ()},
    }
    return PteInspection(**{**values, **changes})


def test_the_summary_of_a_language_model():
    assert summary(language_model()) == [
        "llm.pte: ExecuTorch program, 4.0 KiB, 2 methods",
        "  get_max_seq_len() returns: 128 (a constant: metadata)",
        "  forward(int64 up to [1, 8], Int) -> float32[1, 8, 32]",
        "    no delegate: 12 operator calls on the runtime's kernels",
        "    mutable buffers: 2 (kept between calls)",
        "      layers.0.k_cache  float32[1, 8, 16]",
        "      value 4 (unnamed)  float16[2]",
        "weights: all inside the .pte (2 tensors or blobs); it needs no .ptd",
        "(every segment, key and operator: ptebuild inspect --full llm.pte)",
    ]


def test_every_part_of_a_language_model():
    lines = describe(language_model(methods=(METADATA, DECODER, MethodInfo(
        "shade", (tensor(0, "float32", 4),), (tensor(1, "float32", 4),), (), (INLINE,), 2, 1, "6" * 64, delegate_calls=1))))
    assert lines == [
        "llm.pte: ExecuTorch program (ET12), 4096 bytes, version 0",
        "header: no extended header (no segments)",
        "method get_max_seq_len: 1 values, 0 instructions",
        "  inputs:  -",
        "  outputs: Int",
        "  operators: -",
        "  returns: 128 (a constant: metadata)",
        "method forward: 10 values, 14 instructions",
        "  inputs:  int64[1, 8] (dynamic-bound), Int",
        "  outputs: float32[1, 8, 32]",
        "  operators: aten::mm.out, aten::add.out",
        "  mutable buffers: 2 (kept between calls)",
        "    layers.0.k_cache  float32[1, 8, 16]",
        "    value 4 (unnamed)  float16[2]",
        "method shade: 2 values, 1 instructions",
        "  inputs:  float32[4]",
        "  outputs: float32[4]",
        "  operators: -",
        "  delegated: 1 of 1 calls (VulkanBackend); 0 operator calls outside",
        "  delegate 0: VulkanBackend, inline 0, 300 bytes, keys unknown",
        "    2 shaders, 1 input, 1 output",
        "segments: 1",
        "  0: [64, +16) unused",
        "constant buffers: 2",
        "named data: 0",
        "needs from a .ptd: 0 keys",
        "operators for a selective runtime build: 2 (delegated calls not listed)",
        "  aten::add.out  v1/6;0,1",
        "  aten::mm.out  (not called)",
        "note: cannot read method 'forward' delegate 0: truncated",
    ]


def test_declared_names_are_used_only_when_they_match_the_tensors():
    """One declared name per tensor input, in order; a record that declares another count is
    not trusted for the signature (the file's bounds are shown), its dims still are."""
    declared = DeclaredProgram(("llm",), inputs={"forward": (DeclaredInput("tokens", "int64", (1, "seq")),)},
                               dims={"forward": {"seq": (1, 8)}})
    lines = summary(language_model(), declared)
    assert lines[0].endswith(", program llm (per ptebuild.json)")
    assert lines[2:4] == ["  forward(tokens: int64[1, seq], Int) -> float32[1, 8, 32]",
                          "    seq 1..8; no delegate: 12 operator calls on the runtime's kernels"]
    two = DeclaredProgram(("llm",), inputs={"forward": (DeclaredInput("a", "int64", (1,)), DeclaredInput("b", "int64", (1,)))})
    assert summary(language_model(), two)[2] == "  forward(int64 up to [1, 8], Int) -> float32[1, 8, 32]"


def test_a_method_without_outputs_and_one_without_operator_nodes():
    quiet = MethodInfo("reset", (), (), (), (), 0, 0, "7" * 64)
    shared = DelegateInfo(0, "XnnpackBackend", "segment", 0, 64, 16, "3" * 64)
    empty = MethodInfo("noop", (), (), (), (shared,), 1, 1, "8" * 64, delegate_calls=1)
    figures = FileInsight((), ProgramInsight(Delegation((MethodDelegation("noop", (DelegateShare("XnnpackBackend", 0, ()),), ()),))))
    lines = summary(language_model(methods=(quiet, empty), insight=figures))
    assert lines[1:5] == [
        "  reset() -> nothing",
        "    no delegate: 0 operator calls on the runtime's kernels",
        "  noop() -> nothing",
        "    delegated: 1 of 1 calls (XnnpackBackend)",  # no operator node counted: no share said
    ]


def test_the_sections_are_the_summary_in_order():
    """A new figure is one more section: the summary is the sections' lines and the pointer to --full."""
    inspected = language_model()
    expected = [line for section in PTE_SECTIONS for line in section(inspected, None)]
    assert summary(inspected) == [*expected, "(every segment, key and operator: ptebuild inspect --full llm.pte)"]


def test_a_data_file_built_here():
    ptd = PtdInspection(Path("w.ptd"), 2048, {"flatbuffer_offset": 48, "flatbuffer_size": 100, "segment_base_offset": 256,
                                             "segment_data_size": 1792}, 0, (), (DataKey("a", 1024, 0, "9" * 64), DataKey("b", 768, 1, "a" * 64)))
    assert summary(ptd, DeclaredProgram(("p", "q"))) == [
        "w.ptd: ExecuTorch data file, 2.0 KiB, weights of p, q (per ptebuild.json)",
        "weights: 2 keys, 1.8 KiB",
        "(every key: ptebuild inspect --full w.ptd)",
    ]
    assert describe(ptd)[1:] == ["header: flatbuffer [48, +100), segment data at 256 (1792 bytes)", "keys: 2 in 0 segments",
                                 "  a  1024 bytes  segment 0", "  b  768 bytes  segment 1"]
