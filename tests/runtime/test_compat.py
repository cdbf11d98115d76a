"""Which ExecuTorch runtimes load a program: features read from real files, judged against the table and the policy."""

from __future__ import annotations

from pathlib import Path

import pytest
from release_build import built_bundles

from ptebuild.runtime.compat import (
    FileFormat,
    RuntimeSupport,
    guaranteed_range,
    parse_version,
    program_support,
)


@pytest.fixture(scope="session")
def out(tmp_path_factory) -> Path:
    return built_bundles(tmp_path_factory).parent / "out"


@pytest.mark.parametrize(
    "text, version",
    [("1.5.1", (1, 5, 1)), ("1.5.1+cpu", (1, 5, 1)), ("1.6.0.dev20260101", (1, 6, 0)), ("0.7", (0, 7, 0)),
     (" 2.0.3 ", (2, 0, 3)), ("v1.5", None), ("latest", None), ("", None)],
)
def test_parse_version(text, version):
    assert parse_version(text) == version


def test_the_policy_guarantees_the_writers_release_and_the_next_minor():
    assert guaranteed_range((1, 5, 1)) == ((1, 5, 1), (1, 7, 0))
    assert guaranteed_range((0, 4, 0)) == ((0, 4, 0), (0, 6, 0))
    assert guaranteed_range((0, 3, 0)) == ((0, 3, 0), (0, 3, 1))  # alpha: the same revision only


def test_a_portable_program_with_a_ptd_needs_0_7(out):
    support = program_support(out / "tiny_portable.pte", [out / "tiny_portable_weights.ptd"], writer="1.5.1+cpu")
    assert support.files == (FileFormat("tiny_portable.pte", "ET12", 0), FileFormat("tiny_portable_weights.ptd", "FT01", 0))
    assert support.features == ("constant-segment", "external-data") and support.minimum == (0, 7, 0)
    assert support.to_json() == {
        "files": {"tiny_portable.pte": {"format": "ET12", "schema_version": 0},
                  "tiny_portable_weights.ptd": {"format": "FT01", "schema_version": 0}},
        "writer": "1.5.1", "minimum": "0.7.0", "guaranteed": ">=1.5.1,<1.7.0",
        "requires": {"constant-segment": "0.2.0", "external-data": "0.7.0"}, "backends": [],
    }
    assert RuntimeSupport.from_json(support.to_json()) == support
    refused = support.judge((0, 6, 0))
    assert not refused.loads
    assert refused.cannot_load == ("weights in an external .ptd (FlatTensor layout of 0.7) needs runtime >= 0.7.0",)
    assert support.judge((1, 5, 1)).loads and support.judge((1, 5, 1)).note == ""
    older = support.judge((1, 4, 1))
    assert older.loads and "does not guarantee forward compatibility" in older.note
    newer = support.judge((1, 7, 0))
    assert newer.loads and "past the 1.5.1 to 1.6.x" in newer.note


def test_weights_inside_and_test_cases(out):
    support = program_support(out / "tiny_inside.pte", bpte=out / "tiny_inside.bpte", writer="1.5.1")
    assert support.features == ("bundled-program", "constant-segment") and support.minimum == (0, 2, 0)
    assert support.files[-1] == FileFormat("tiny_inside.bpte", "BP08", 2)
    assert support.judge((0, 2, 0)).loads
    assert support.judge((0, 1, 0)).cannot_load == (
        "a BundledProgram (.bpte, BP08) needs runtime >= 0.2.0",
        "constant tensors in a segment (Program.constant_segment) needs runtime >= 0.2.0",
    )


def test_an_xnnpack_program_names_its_backend(out, programs):
    support = program_support(out / "tiny_xnnpack.pte", [out / "tiny_xnnpack_weights.ptd"], writer="1.5.1")
    assert support.backends == ("XnnpackBackend",) and support.minimum == (0, 7, 0)
    inline = program_support(programs.folder / "xinline.pte", writer="1.5.1")  # constants as named data in the .pte
    assert "named-data" in inline.features and "external-data" not in inline.features and inline.minimum == (0, 6, 0)


def test_a_newer_schema_version_is_refused_by_runtimes_that_check_it():
    support = RuntimeSupport((FileFormat("p.pte", "ET12", 1), FileFormat("w.ptd", "FT01", 0)), (1, 6, 0), ())
    assert support.judge((1, 4, 1)).loads  # never read the field
    assert support.judge((1, 5, 0)).cannot_load == ("p.pte has schema version 1, runtimes since 1.5.0 read at most 0",)


def test_an_unknown_writer_gives_no_guarantee_and_no_note():
    support = RuntimeSupport((FileFormat("p.pte", "ET12", 0),), None, ("constant-segment",))
    assert support.guaranteed is None and support.judge((9, 0, 0)).note == ""
    assert support.to_json()["writer"] is None and support.to_json()["guaranteed"] is None


@pytest.mark.parametrize(
    "document, message",
    [({}, "expected a table with files"), ({"files": {"p.pte": {"format": "ET12"}}}, "files.p.pte: expected format and schema_version"),
     ({"files": {}, "writer": "next"}, "writer: 'next' is not a version"), ({"files": {}, "backends": "x"}, "backends: expected a list of strings")],
)
def test_from_json_refuses_what_to_json_does_not_write(document, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        RuntimeSupport.from_json(document)

