"""Reading .pte files without executing them: methods, needed keys, malformed files as FormatError."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys

import pytest
from runtime_programs import patched

from ptebuild.errors import FormatError
from ptebuild.runtime.payload_readers.xnnpack import HEADER_MAGIC, graph_bytes, xnnpack_named_keys
from ptebuild.runtime.ptd_file import read_ptd
from ptebuild.runtime.pte_file import (
    EXTENDED_HEADER,
    EXTENDED_HEADER_OFFSET,
    CompileSpec,
    DataLocation,
    Instruction,
    Operator,
    Segment,
    TensorDataLocation,
    open_pte,
    read_pte,
)


def test_portable_program_needs_its_external_tensors(programs):
    pte = read_pte(programs.a.pte)
    assert pte.method_names == ("forward",)
    assert pte.external_tensor_keys == read_ptd(programs.a.ptd).keys
    assert not pte.delegate_keys and not pte.named_data_keys and not pte.opaque_delegates


def test_xnnpack_program_needs_the_keys_of_its_delegate_blob(programs):
    pte = read_pte(programs.xa.pte)
    assert not pte.external_tensor_keys
    assert pte.delegate_keys == read_ptd(programs.xa.ptd).keys
    assert pte.required_keys == pte.delegate_keys


def test_keys_stored_inside_the_pte_are_not_needed_from_outside(programs):
    pte = read_pte(programs.xinline.pte)
    assert programs.xinline.ptds == ()
    assert pte.delegate_keys and pte.delegate_keys <= pte.named_data_keys
    assert pte.required_keys == frozenset()


def test_all_methods_are_listed(programs):
    assert read_pte(programs.multi.pte).method_names == ("doubled", "forward")


@pytest.mark.parametrize("name", ["a", "xa", "xinline"])
def test_every_truncation_is_a_format_error(programs, tmp_path, name):
    raw = getattr(programs, name).pte.read_bytes()
    cut = tmp_path / "cut.pte"
    for length in range(len(raw)):
        cut.write_bytes(raw[:length])
        with pytest.raises(FormatError, match="cut.pte"):
            read_pte(cut)


@pytest.mark.parametrize("name", ["a", "xa"])
def test_every_flipped_byte_is_read_or_refused(programs, tmp_path, name):
    """Corrupt offsets and lengths must surface as FormatError, never IndexError/struct.error."""
    raw = getattr(programs, name).pte.read_bytes()
    bad = tmp_path / "bad.pte"
    for position in range(len(raw)):
        corrupt = bytearray(raw)
        corrupt[position] ^= 0xFF
        bad.write_bytes(corrupt)
        try:
            read_pte(bad)
        except FormatError:
            pass


BAD_HEADERS = [
    ("identifier", lambda raw: patched(raw, 4, "4s", b"ET11"),
     r"not a \.pte file: identifier b'ET11' at offset 4, expected b'ET12'"),
    ("header length", lambda raw: patched(raw, 12, "<I", 8),
     r"bad extended header at offset 8: length 8"),
    ("program past end", lambda raw: patched(raw, 16, "<Q", 1 << 40),
     r"truncated: header promises \d+ bytes of program"),
    ("root offset past end", lambda raw: patched(raw, 0, "<I", 1 << 30),
     r"truncated or corrupt: cannot read Program vtable offset \(4 bytes\) at offset \d+"),
    ("empty", lambda raw: b"", r"truncated: 0 bytes, too short for a \.pte"),
]


@pytest.mark.parametrize("make, message", [b[1:] for b in BAD_HEADERS], ids=[b[0] for b in BAD_HEADERS])
def test_bad_headers(programs, tmp_path, make, message):
    raw = programs.xa.pte.read_bytes()  # a program with segments has the extended header
    assert raw[EXTENDED_HEADER_OFFSET : EXTENDED_HEADER_OFFSET + 4] == b"eh00"
    assert EXTENDED_HEADER.size == 24
    bad = tmp_path / "bad.pte"
    bad.write_bytes(make(raw))
    with pytest.raises(FormatError, match=f"^{bad}: {message}"):
        read_pte(bad)


def test_a_ptd_is_not_a_pte(programs):
    with pytest.raises(FormatError, match=r"identifier b'FT01' at offset 4, expected b'ET12'"):
        read_pte(programs.a.ptd)


def test_readers_import_neither_torch_nor_executorch(programs):
    code = (
        "import sys\n"
        "from ptebuild.runtime.pte_file import read_pte\n"
        "from ptebuild.runtime.ptd_file import read_ptd\n"
        "import ptebuild.runtime\n"
        f"ptebuild.runtime.check({str(programs.a.pte)!r}, [{str(programs.a.ptd)!r}], verify_bytes=True)\n"
        "print(sorted(m for m in ('torch', 'executorch', 'numpy') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# The reading API (open_pte / PteReader) that read_pte, ptebuild inspect and the CUDA reader share.


def test_reader_header_and_segments_of_a_program_with_segments(programs):
    raw = programs.xa.pte.read_bytes()
    _, _, program_size, segment_base = EXTENDED_HEADER.unpack_from(raw, EXTENDED_HEADER_OFFSET)
    with open_pte(programs.xa.pte) as pte:
        assert pte.source == str(programs.xa.pte) and pte.file_size == len(raw)
        assert pte.header.extended
        assert (pte.header.program_size, pte.header.segment_base) == (program_size, segment_base)
        assert pte.header.segment_base + pte.header.segment_data_size <= len(raw)
        assert pte.segments and all(isinstance(s, Segment) for s in pte.segments)
        for i, (offset, size) in enumerate(pte.segments):
            assert segment_base <= offset and offset + size <= len(raw)
            assert pte.read(offset, size, f"segment {i}") == raw[offset : offset + size]
            assert pte.sha256_of_range(offset, size, f"segment {i}") == hashlib.sha256(raw[offset : offset + size]).hexdigest()
        assert pte.version() == 0


def test_reader_header_of_a_program_without_segments(programs):
    with open_pte(programs.a.pte) as pte:  # every weight external: no extended header
        assert not pte.header.extended
        assert pte.header.program_size == pte.file_size == programs.a.pte.stat().st_size
        assert (pte.header.segment_base, pte.header.segment_data_size) == (0, 0)
        assert all(size == 0 for _, size in pte.segments)


@pytest.mark.parametrize("name", ["a", "xa", "xinline", "multi"])
def test_reader_agrees_with_read_pte(programs, name):
    program = read_pte(getattr(programs, name).pte)
    with open_pte(getattr(programs, name).pte) as pte:
        plans = pte.execution_plans()
        assert tuple(plan.name() for plan in plans) == program.method_names
        assert [plan.path for plan in plans] == [f"Program.execution_plan[{i}]" for i in range(len(plans))]
        assert set().union(*(plan.external_tensor_keys() for plan in plans)) == program.external_tensor_keys
        assert {key for named in pte.named_data() if (key := named.key())} == program.named_data_keys


def test_reader_values_operators_and_instructions_of_a_portable_method(programs):
    with open_pte(programs.a.pte) as pte:
        [plan] = pte.execution_plans()
        values = plan.values()
        [x] = [values[i] for i in plan.inputs()]
        assert x.kind == "Tensor" and x.present
        assert (x.tensor.scalar_type, x.tensor.sizes, x.tensor.shape_dynamism) == (6, (1, 4), 0)  # float32, EXAMPLE, static
        assert all(values[i].kind == "Tensor" for i in plan.outputs())
        external = {
            v.tensor.extra.fully_qualified_name
            for v in values
            if v.tensor is not None and v.tensor.extra is not None and v.tensor.extra.location == TensorDataLocation.EXTERNAL
        }
        assert external == plan.external_tensor_keys() == read_pte(programs.a.pte).external_tensor_keys
        operators = plan.operators()
        assert Operator("aten::addmm", "out") in operators
        [chain] = plan.chains()
        calls = [step for step in chain.instructions if step.kind == "KernelCall"]
        assert len(calls) == len(chain.instructions) >= len(operators)
        for op_index, args in (call.operands for call in calls):
            assert 0 <= op_index < len(operators) and all(0 <= arg < len(values) for arg in args)
        assert plan.delegates() == []
        assert plan.non_const_buffer_sizes()[0] == 0


def test_reader_delegate_reference_blob_and_specs(programs):
    raw = programs.xa.pte.read_bytes()
    with open_pte(programs.xa.pte) as pte:
        [plan] = pte.execution_plans()
        [delegate] = plan.delegates()
        assert (delegate.index, delegate.backend()) == (0, "XnnpackBackend")
        assert delegate.path == "Program.execution_plan[0].delegates[0]"
        reference = delegate.processed("where")
        assert reference.location == DataLocation.SEGMENT
        offset, size = pte.segments[reference.index]
        blob = graph_bytes(pte.payload(plan.name(), delegate))
        # Only the XNNPACK header and flatbuffer: the constant data after them is not read.
        assert blob[4:8] == HEADER_MAGIC and len(blob) <= size and raw[offset : offset + len(blob)] == blob
        assert xnnpack_named_keys(blob, "where") == read_pte(programs.xa.pte).delegate_keys
        assert all(isinstance(spec, CompileSpec) for spec in delegate.compile_specs())
        [step] = plan.chains()[0].instructions
        assert step == Instruction("DelegateCall", (0, (*plan.inputs(), *plan.outputs())))
        assert pte.inline_data_count == 0


def test_reader_named_data_points_at_its_bytes(programs):
    with open_pte(programs.xinline.pte) as pte:
        named = pte.named_data()
        assert named and [n.path for n in named] == [f"Program.named_data[{i}]" for i in range(len(named))]
        for item in named:
            offset, size = pte.segments[item.segment_index()]
            # XNNPACK keys each constant by the SHA-256 of its bytes.
            assert pte.sha256_of_range(offset, size, item.key()) == item.key()
            assert hashlib.sha256(pte.read(offset, size, item.key())).hexdigest() == item.key()


def test_reader_ranges_past_the_end_are_format_errors(programs):
    path = programs.xa.pte
    size = path.stat().st_size
    prefix = re.escape(f"{path}: truncated: ")
    with open_pte(path) as pte:
        with pytest.raises(FormatError, match=rf"^{prefix}tail \(10 bytes at offset {size - 4}\) ends past the end of the file$"):
            pte.sha256_of_range(size - 4, 10, "tail")
        message = rf"^{prefix}cannot read tail \(10 bytes\) at offset {size - 4}, file has {size} bytes$"
        with pytest.raises(FormatError, match=message):
            pte.read(size - 4, 10, "tail")


def test_reader_refuses_what_read_pte_refuses(programs, tmp_path):
    with pytest.raises(FormatError, match=r"identifier b'FT01' at offset 4, expected b'ET12'"):
        with open_pte(programs.a.ptd):
            pass
    bad = tmp_path / "bad.pte"
    bad.write_bytes(patched(programs.xa.pte.read_bytes(), 16, "<Q", 1 << 40))
    with pytest.raises(FormatError, match=rf"^{re.escape(str(bad))}: truncated: header promises \d+ bytes of program"):
        with open_pte(bad):
            pass
