"""What ``inspect_pte`` (ptebuild.runtime.pte_inspection) says of a real ``.pte``: the committed
CUDA program of ``tests/cuda/data`` (one delegate whose payload names its weights, the compiled
``.so`` as named data), read without torch. Every figure is checked against the file's bytes read
here on their own (the extended header, segment digests, the ``.ptd``'s keys); the plan digest
covers the plan and only it; a reference out of range, a cut file or another kind of file is a
FormatError naming the file."""

from __future__ import annotations

import hashlib
import re
import struct
from pathlib import Path

import pytest

from ptebuild.errors import FormatError
from ptebuild.runtime.inspection import ValueSpec
from ptebuild.runtime.ptd_file import read_ptd
from ptebuild.runtime.pte_inspection import inspect_pte

DATA = Path(__file__).resolve().parents[1] / "cuda" / "data"
PTE = DATA / "tiny_cuda_a.pte"
PTD = DATA / "tiny_cuda_a_weights.ptd"


# -- the flatbuffer, read here on its own (executorch program.fbs; field numbers as in pte_file's docstring) --


class Flatbuffer:
    """Where fields of a ``.pte``'s Program flatbuffer lie, to patch a copy of the file."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def u32(self, pos: int) -> int:
        return struct.unpack_from("<I", self.data, pos)[0]

    def field(self, table: int, index: int) -> int:
        vtable = table - struct.unpack_from("<i", self.data, table)[0]
        return table + struct.unpack_from("<H", self.data, vtable + 4 + 2 * index)[0]

    def table(self, table: int, index: int) -> int:
        pos = self.field(table, index)
        return pos + self.u32(pos)

    def vector(self, table: int, index: int) -> int:
        """The position of the vector's first element."""
        return self.table(table, index) + 4

    def tables(self, table: int, index: int) -> list[int]:
        start = self.vector(table, index)
        return [start + 4 * i + self.u32(start + 4 * i) for i in range(self.u32(start - 4))]

    @property
    def root(self) -> int:
        return self.u32(0)

    def plan(self) -> int:
        return self.tables(self.root, 1)[0]  # Program.execution_plan[0]


def patched(tmp_path: Path, at: int, fmt: str, value: int) -> Path:
    data = bytearray(PTE.read_bytes())
    struct.pack_into(fmt, data, at, value)
    out = tmp_path / "patched.pte"
    out.write_bytes(data)
    return out


@pytest.fixture(scope="module")
def found():
    return inspect_pte(PTE)


# -- what it says -------------------------------------------------------------------------------


def test_the_header_is_the_files(found):
    data = PTE.read_bytes()
    magic, length, program_size, base, segment_data = struct.unpack_from("<4sIQQQ", data, 8)
    assert (magic, length) == (b"eh00", 32)
    assert found.header == {"identifier": "ET12", "extended_header": True, "program_size": program_size,
                            "segment_base_offset": base, "segment_data_size": segment_data}
    assert (found.size, found.version, found.kind, found.path) == (len(data), 0, "pte", PTE)
    assert base + segment_data == len(data)


def test_the_method(found):
    [method] = found.methods
    assert method.name == "forward"
    assert method.inputs == (ValueSpec(0, "Tensor", "float32", (4, 8), "dynamic-bound"),)
    assert method.outputs == (ValueSpec(3, "Tensor", "float32", (4, 4), "dynamic-bound"),)
    assert method.operators == ("et_copy::_h2d_copy.out", "et_copy::_d2h_copy.out")  # to and from the GPU
    assert (method.values, method.instructions, method.delegate_calls, method.kernel_calls) == (4, 3, 1, 2)
    assert (method.mutable_buffers, method.returns_constant, method.constant) == ((), False, None)
    assert set(method.plan_parts) == {"inputs", "outputs", "values", "operators", "chains", "delegates", "non_const_buffer_sizes"}
    assert found.method("forward") is method and found.method("generate") is None


def test_segments_are_hashed_and_name_their_users(found):
    data = PTE.read_bytes()
    for segment in found.segments:
        assert segment.sha256 == hashlib.sha256(data[segment.offset:segment.offset + segment.size]).hexdigest()
    [so] = found.named_data
    assert [s.used_by for s in found.segments] == [
        ("constant tensors",),  # empty: every weight is in the .ptd
        ("method 'forward' delegate 0 (CudaBackend)",),
        (f"named data {so.key!r}",),
    ]
    assert found.segments[0].size == 0 and found.constant_buffers == ()


def test_the_delegate(found):
    [delegate] = found.methods[0].delegates
    segment = found.segments[delegate.data_index]
    assert (delegate.index, delegate.backend, delegate.location) == (0, "CudaBackend", "segment")
    assert (delegate.offset, delegate.size, delegate.sha256) == (segment.offset, segment.size, segment.sha256)
    assert "platform" in delegate.compile_specs and "method_name" in delegate.compile_specs
    assert (delegate.contents, delegate.summary) == (None, None)  # the CUDA reader lists keys, not contents


def test_the_keys_it_needs_are_the_ptds_and_the_so_it_carries_itself(found):
    """The payload names the .so (named data of the .pte) and each weight's storage (the .ptd)."""
    [delegate] = found.methods[0].delegates
    [so] = found.named_data
    assert found.needs == tuple(sorted(read_ptd(PTD).keys))
    assert set(delegate.keys) == {*found.needs, so.key}
    assert so.key == f"{so.sha256}_so_blob"  # the .so is named by its digest, which is checked here
    assert (so.segment, so.size) == (2, found.segments[2].size) and so.sha256 == found.segments[2].sha256
    assert found.notes == ()


def test_the_operators_of_a_selective_runtime_are_those_outside_the_delegate(found):
    assert set(found.kernels) == set(found.methods[0].operators)
    assert all(len(keys) == 1 and keys[0].startswith("v1/") for keys in found.kernels.values())


# -- the plan digest ----------------------------------------------------------------------------


def test_the_plan_digest_leaves_the_payloads_out(found, tmp_path):
    data = bytearray(PTE.read_bytes())
    [delegate] = found.methods[0].delegates
    payload = data[delegate.offset:delegate.offset + delegate.size]
    at = delegate.offset + payload.index(b"model.out.weight")  # a weight's FQN (its storage key follows)
    data[at + len("model.out.w")] = ord("W")
    data[found.segments[2].offset + 1000] ^= 0xFF  # a byte of the .so
    changed = tmp_path / "changed.pte"
    changed.write_bytes(data)
    again = inspect_pte(changed)
    assert again.methods[0].plan_sha256 == found.methods[0].plan_sha256
    assert again.methods[0].plan_parts == found.methods[0].plan_parts
    assert again.methods[0].delegates[0].sha256 != delegate.sha256
    assert again.methods[0].delegates[0].keys == delegate.keys  # the FQN is not a key
    assert [s.sha256 != t.sha256 for s, t in zip(again.segments, found.segments)] == [False, True, True]
    assert again.named_data[0].sha256 == again.segments[2].sha256 != found.named_data[0].sha256


def test_each_part_of_the_plan_has_its_digest(found, tmp_path):
    fb = Flatbuffer(PTE.read_bytes())
    value = fb.tables(fb.plan(), 2)[0]  # ExecutionPlan.values[0]: the input
    tensor = fb.table(value, 1)  # EValue.val: a Tensor
    sizes = fb.vector(tensor, 2)  # Tensor.sizes: [4, 8]
    assert struct.unpack_from("<2i", fb.data, sizes) == (4, 8)
    again = inspect_pte(patched(tmp_path, sizes + 4, "<i", 9))
    before, after = found.methods[0], again.methods[0]
    assert after.inputs == (ValueSpec(0, "Tensor", "float32", (4, 9), "dynamic-bound"),)
    assert {part for part in before.plan_parts if before.plan_parts[part] != after.plan_parts[part]} == {"inputs", "values"}
    assert after.plan_sha256 != before.plan_sha256


def test_an_input_out_of_range_is_said_so(tmp_path):
    fb = Flatbuffer(PTE.read_bytes())
    inputs = fb.vector(fb.plan(), 3)  # ExecutionPlan.inputs: [0]
    again = inspect_pte(patched(tmp_path, inputs, "<i", 99))
    assert again.methods[0].inputs == (ValueSpec(99, "out of range"),)


# -- what it refuses ----------------------------------------------------------------------------


def test_named_data_pointing_past_the_segments(tmp_path):
    fb = Flatbuffer(PTE.read_bytes())
    named = fb.tables(fb.root, 7)[0]  # Program.named_data[0]
    bad = patched(tmp_path, fb.field(named, 1), "<I", 7)  # NamedData.segment_index: 2 -> 7
    with pytest.raises(FormatError) as raised:
        inspect_pte(bad)
    key = inspect_pte(PTE).named_data[0].key
    assert str(raised.value) == f"{bad}: Program.named_data[0] ({key!r}) points at segment 7, file has 3"


def test_a_delegate_payload_pointing_past_the_segments(tmp_path):
    fb = Flatbuffer(PTE.read_bytes())
    delegate = fb.tables(fb.plan(), 7)[0]  # ExecutionPlan.delegates[0]
    processed = fb.table(delegate, 1)  # BackendDelegate.processed
    bad = patched(tmp_path, fb.field(processed, 1), "<I", 9)  # its segment index: 1 -> 9
    with pytest.raises(FormatError) as raised:
        inspect_pte(bad)
    assert str(raised.value) == f"{bad}: method 'forward' delegate 0 (CudaBackend): bad processed reference (location 1, index 9)"


def test_another_kind_of_file_is_refused(tmp_path):
    with pytest.raises(FormatError, match=f"^{re.escape(str(PTD))}: "):
        inspect_pte(PTD)
    (tmp_path / "empty.pte").write_bytes(b"")
    with pytest.raises(FormatError, match="empty.pte"):
        inspect_pte(tmp_path / "empty.pte")


def test_every_cut_is_a_format_error(found, tmp_path):
    """Every length within the headers, a byte either side of each boundary, every 13th length
    in the flatbuffer and the delegate's payload, then cuts inside the .so."""
    data = PTE.read_bytes()
    [delegate] = found.methods[0].delegates
    end = delegate.offset + delegate.size
    edges = (found.header["program_size"], found.header["segment_base_offset"], end, found.segments[2].offset)
    lengths = {*range(64), *range(64, end, 13), *(e + d for e in edges for d in (-1, 0, 1)),
               *range(found.segments[2].offset, len(data), 99_991), len(data) - 1}
    cut = tmp_path / "cut.pte"
    for length in sorted(lengths):
        cut.write_bytes(data[:length])
        with pytest.raises(FormatError, match="cut.pte"):
            inspect_pte(cut)


def test_a_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        inspect_pte(tmp_path / "gone.pte")
