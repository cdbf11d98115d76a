"""Reading a .bpte (ExecuTorch's BundledProgram) without executorch, and checking test cases against a .pte."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from release_build import built_bundles

from ptebuild.errors import FormatError
from ptebuild.runtime.bpte_file import BundledCase, BundledSuite, BundledTensor, BundledValue, check_suites, parse_bpte, read_bpte


@pytest.fixture(scope="session")
def out(tmp_path_factory) -> Path:
    return built_bundles(tmp_path_factory).parent / "out"


def test_a_bundled_program_holds_its_pte_and_the_checks_cases(out):
    bundled = read_bpte(out / "tiny_inside.bpte")
    assert bundled.version == 2
    assert [s.method for s in bundled.suites] == ["forward", "score"]
    assert bundled.read_program() == (out / "tiny_inside.pte").read_bytes()
    score = bundled.suite("score")
    # the example size (batch 2), then the dim's min and max
    assert [c.inputs[0].tensor.sizes for c in score.cases] == [(2, 6), (1, 6), (4, 6)]
    assert [v.tensor.scalar_type for v in score.cases[0].inputs] == [6, 4, 11]  # float32, int64, bool
    [output] = score.cases[2].expected_outputs
    assert output.kind == "Tensor" and output.tensor.sizes == (4, 3) and len(output.tensor.data) == 4 * 3 * 4
    assert check_suites(out / "tiny_inside.pte", bundled.suites) == []


def test_every_cut_is_a_format_error_or_reads_the_same(out):
    """Cut anywhere, the file is refused with a FormatError, or (cut in trailing padding) still
    reads as the whole file does."""
    data = (out / "tiny_inside.bpte").read_bytes()
    whole = parse_bpte(data, "t.bpte")
    for length in range(0, len(data), max(1, len(data) // 400)):
        try:
            cut = parse_bpte(data[:length], "t.bpte")
        except FormatError:
            continue
        assert (cut.suites, cut.program_offset, cut.program_size) == (whole.suites, whole.program_offset, whole.program_size)


@pytest.mark.parametrize(
    "head, message",
    [
        (b"", "t.bpte: truncated: 0 bytes, too short for a .bpte"),
        (b"\x08\0\0\0ET12", "t.bpte: not a .bpte file: identifier b'ET12' at offset 4, expected b'BP08'"),
        (b"\x08\0\0\0BP06", "t.bpte: not a .bpte file: identifier b'BP06' at offset 4, expected b'BP08'"),
        (struct.pack("<I", 4096) + b"BP08", "t.bpte: truncated or corrupt: cannot read BundledProgram vtable offset (4 bytes) at offset 4096"),
    ],
    ids=["empty", "a-pte", "v0.1-bundle", "root-past-the-end"],
)
def test_bad_headers(head, message):
    with pytest.raises(FormatError) as info:
        parse_bpte(head, "t.bpte")
    assert str(info.value) == message


def tensor(scalar_type: int, *sizes: int) -> BundledValue:
    return BundledValue("Tensor", tensor=BundledTensor(scalar_type, sizes, tuple(range(len(sizes))), b""))


@pytest.mark.parametrize(
    "suite, problem",
    [
        (BundledSuite("nope", ()), "method 'nope': tiny_inside.pte has no such method (it has forward, score)"),
        (BundledSuite("forward", (BundledCase((tensor(7, 2, 6),), (tensor(6, 2, 3),)),)),
         "method 'forward' test case 0 input 0: dtype float64, the program's is float32"),
        (BundledSuite("forward", (BundledCase((tensor(6, 2, 6), tensor(6, 2)), (tensor(6, 2, 3),)),)),
         "method 'forward' test case 0: 2 inputs, the program takes 1"),
        (BundledSuite("forward", (BundledCase((tensor(6, 12),), (tensor(6, 2, 3),)),)),
         "method 'forward' test case 0 input 0: 1 dimensions, the program's input has 2"),
        (BundledSuite("forward", (BundledCase((BundledValue("Int", scalar=3),), (tensor(6, 2, 3),)),)),
         "method 'forward' test case 0 input 0: Int, the program takes a tensor"),
        (BundledSuite("forward", (BundledCase((tensor(6, 2, 6),), ()),)),
         "method 'forward' test case 0: 0 expected outputs, the program returns 1"),
        (BundledSuite("forward", (BundledCase((tensor(6, 2, 6),), (tensor(4, 2, 3),)),)),
         "method 'forward' test case 0 expected output 0: dtype int64, the program's is float32"),
    ],
    ids=["unknown-method", "input-dtype", "input-count", "input-rank", "input-kind", "output-count", "output-dtype"],
)
def test_test_cases_that_do_not_fit_the_program(out, suite, problem):
    assert check_suites(out / "tiny_inside.pte", [suite]) == [problem]
