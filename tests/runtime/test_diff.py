"""`ptebuild diff` on real built files: it names the part that differs."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "release"))
from release_build import built_tiny

from ptebuild import cli
from ptebuild.runtime import read_ptd
from ptebuild.runtime.diff import Part, diff
from ptebuild.runtime.inspect import inspect


@pytest.fixture(scope="session")
def out(tmp_path_factory) -> Path:
    return built_tiny(tmp_path_factory).parent / "out"


def flipped(source: Path, dest: Path, offset: int) -> Path:
    data = bytearray(source.read_bytes())
    data[offset] ^= 0x01
    dest.write_bytes(data)
    return dest


def test_identical_files_have_no_differences(out, tmp_path, capsys):
    copy = Path(shutil.copy(out / "tiny_xnnpack.pte", tmp_path / "copy.pte"))
    assert diff(out / "tiny_xnnpack.pte", copy).same
    assert cli.main(["diff", str(out / "tiny_xnnpack.pte"), str(copy)]) == 0
    assert capsys.readouterr().out.endswith("are identical\n")


def test_a_flipped_byte_in_a_delegate_payload_names_the_delegate(out, tmp_path, capsys):
    pte = out / "tiny_xnnpack.pte"
    delegate = inspect(pte).method("score").delegates[0]
    copy = flipped(pte, tmp_path / "flipped.pte", delegate.offset + delegate.size - 1)
    [difference] = diff(pte, copy).differences
    assert (difference.part, difference.where) == (Part.DELEGATE, "method 'score' delegate 0 (XnnpackBackend)")
    assert difference.detail.startswith(f"payload differs: {delegate.size} bytes, sha256 {delegate.sha256[:12]}... -> ")
    assert difference.detail.endswith(f"first at payload byte {delegate.size - 1}")
    assert cli.main(["diff", str(pte), str(copy)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == str(difference) and lines[1].startswith("1 differences between ")


def test_another_program_differs_in_header_plans_and_delegates(out, capsys):
    report = diff(out / "tiny_xnnpack.pte", out / "tiny_portable.pte")
    where = [d.where for d in report.differences]
    assert where[0] == "header" and report.differences[0].part == Part.HEADER
    for method in ("forward", "score"):
        assert f"method {method!r} plan" in where
        assert f"method {method!r} delegates" in where
    plan = next(d for d in report.differences if d.where == "method 'forward' plan")
    assert "operators +aten::permute_copy.out, +aten::addmm.out, +aten::relu.out" in plan.detail
    assert "inputs" not in plan.detail  # same signature: not reported
    assert cli.main(["diff", "--json", str(out / "tiny_xnnpack.pte"), str(out / "tiny_portable.pte")]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["same"] is False and {d["part"] for d in document["differences"]} >= {"header", "plan", "delegate"}


def test_a_flipped_byte_in_a_weight_names_the_data_key(out, tmp_path):
    ptd = out / "tiny_portable_weights.ptd"
    entry = min(inspect(ptd).keys, key=lambda k: k.key)
    copy = flipped(ptd, tmp_path / "w.ptd", read_ptd(ptd).entries[entry.key].offset)
    [difference] = diff(ptd, copy).differences
    assert (difference.part, difference.where) == (Part.DATA_KEY, f"data key {entry.key!r}")
    assert difference.detail.startswith(f"{entry.size} bytes, sha256 {entry.sha256[:12]}... -> ")


def test_two_data_files_differ_by_their_keys(out):
    report = diff(out / "tiny_xnnpack_weights.ptd", out / "tiny_portable_weights.ptd")
    details = {d.detail for d in report.differences if d.part == Part.DATA_KEY}
    assert details == {"only in the first file", "only in the second file"}


def test_padding_is_a_bytes_difference(out, tmp_path):
    pte = out / "tiny_xnnpack.pte"
    header = inspect(pte).header
    gap = header["program_size"]
    assert gap < header["segment_base_offset"], "no padding between the flatbuffer and the segments"
    [difference] = diff(pte, flipped(pte, tmp_path / "padded.pte", gap)).differences
    assert difference.part == Part.BYTES and difference.detail.startswith(f"differ first at offset {gap}, ")


def test_a_pte_and_a_ptd(out):
    [difference] = diff(out / "tiny_xnnpack.pte", out / "tiny_xnnpack_weights.ptd").differences
    assert str(difference) == "file: a .pte and a .ptd"


def test_an_unreadable_file_is_exit_2(out, tmp_path, capsys):
    assert cli.main(["diff", str(out / "tiny_xnnpack.pte"), str(tmp_path / "gone.pte")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'gone.pte'}: cannot read: No such file or directory; give the paths of two .pte or .ptd files\n"


def test_weights_only_sees_through_sha256_weight_keys(programs):
    """Same architecture, other seeds: the .pte differ in their keys alone (portable and XNNPACK);
    another architecture is another program."""
    from ptebuild.runtime.diff import weights_only

    folder = programs.folder
    assert not diff(folder / "a.pte", folder / "b.pte").same
    assert weights_only(folder / "a.pte", folder / "b.pte")
    assert weights_only(folder / "xa.pte", folder / "xb.pte")
    assert not weights_only(folder / "a.pte", folder / "multi.pte")
    assert not weights_only(folder / "a.pte", folder / "xa.pte")


def test_weights_only_sees_through_weights_inside_the_pte(programs, tmp_path):
    from runtime_programs import export_xnnpack, two_linear

    from ptebuild.runtime.diff import weights_only

    other = export_xnnpack(tmp_path, "xinline_b", two_linear(1), None).pte
    assert other.read_bytes() != (programs.folder / "xinline.pte").read_bytes()
    assert weights_only(programs.folder / "xinline.pte", other)
