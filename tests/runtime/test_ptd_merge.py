"""Merging programs' .ptd files into one shared weights file: real programs, conflicts, dedup, truncation."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from project_copy import copy_project
from ptd_flips import flatbuffer_flips

from ptebuild.errors import FormatError
from ptebuild.runtime import check
from ptebuild.runtime.ptd_file import ScalarType, TensorLayout, read_ptd, read_tensor_layouts
from ptebuild.runtime.ptd_merge import merge_ptd
from ptebuild.runtime.ptd_write import BytesSegment, FileSegment, NamedData, serialize_ptd, write_ptd_file

PTEBUILD = Path(sys.executable).parent / "ptebuild"
PROGRAMS = ("tiny_portable", "tiny_xnnpack")


@dataclass(frozen=True)
class Built:
    out: Path
    merged: Path
    report: object

    def pte(self, program: str) -> Path:
        return self.out / f"{program}.pte"

    def ptd(self, program: str) -> Path:
        return self.out / f"{program}_weights.ptd"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Built:
    """tests/manifests/tiny.toml built once (portable and XNNPACK programs of one model), then merged."""
    root = tmp_path_factory.mktemp("tiny")
    manifest = copy_project(root / "project")
    result = subprocess.run(
        [str(PTEBUILD), "build", str(manifest), "--cache", str(root / "cache")],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    out = manifest.parent / "out"
    merged = root / "tiny_weights.ptd"
    report = merge_ptd([out / f"{p}_weights.ptd" for p in PROGRAMS], merged)
    return Built(out, merged, report)


def test_merged_file_holds_the_union_each_blob_once(built):
    sources = [read_ptd(built.ptd(p)) for p in PROGRAMS]
    merged = read_ptd(built.merged)
    union = frozenset().union(*(s.keys for s in sources))
    assert merged.keys == union
    assert list(merged.entries) == sorted(union)
    contents = {s.read_blob(k) for s in sources for k in s.keys}
    assert len(set(merged.sha256_by_segment().values())) == len(contents) == built.report.segments
    # Same-keyed entries keep their layout; the XNNPACK keys keep having none.
    merged_layouts = read_tensor_layouts(built.merged)
    for source in sources:
        for key, layout in read_tensor_layouts(source.path).items():
            assert merged_layouts[key] == layout
            assert merged.read_blob(key) == source.read_blob(key)
    report = built.report
    assert report.keys == len(union)
    assert report.blob_bytes == sum(len(c) for c in contents)
    assert report.bytes_saved == sum(merged.entries[k].size for k in union) - report.blob_bytes
    assert report.source_blob_bytes == sum(sum({e.segment_index: e.size for e in s.entries.values()}.values()) for s in sources)
    # The two programs of one model hold the same weights: every XNNPACK blob is a portable one.
    assert report.blob_bytes * 2 == report.source_blob_bytes
    assert report.bytes_saved > 0
    assert report.file_size == built.merged.stat().st_size < sum(built.ptd(p).stat().st_size for p in PROGRAMS)


@pytest.mark.parametrize("program", PROGRAMS)
def test_check_passes_for_every_program(built, program):
    checked = check(built.pte(program), [built.merged], verify_bytes=True)
    assert checked.data_path == built.merged


@pytest.fixture(scope="module")
def executorch_runtime():
    """executorch's runtime and torch (seconds to import: once per module)."""
    import torch
    from executorch.runtime import Runtime

    return Runtime.get(), torch


@pytest.mark.parametrize("program", PROGRAMS)
def test_executorch_runs_each_program_with_the_merged_file(built, executorch_runtime, program):
    runtime, torch = executorch_runtime
    generator = torch.Generator().manual_seed(7)
    inputs = {
        "forward": [torch.randn(3, 6, generator=generator)],
        "score": [
            torch.randn(3, 6, generator=generator),
            torch.randint(0, 10, (3,), generator=generator),
            torch.tensor([True, False, True]),
        ],
    }
    own = runtime.load_program(built.pte(program), data_path=built.ptd(program))
    shared = runtime.load_program(built.pte(program), data_path=built.merged)
    for method, args in inputs.items():
        expected = own.load_method(method).execute(args)
        actual = shared.load_method(method).execute(args)
        assert len(actual) == len(expected) == 1
        assert torch.equal(actual[0], expected[0]), (program, method)


def test_merges_are_byte_identical_whatever_the_order(built, tmp_path):
    again = tmp_path / "again.ptd"
    merge_ptd([built.ptd(p) for p in reversed(PROGRAMS)], again)
    assert again.read_bytes() == built.merged.read_bytes()


@pytest.mark.parametrize("program", PROGRAMS)
def test_rewriting_a_built_ptd_gives_executorchs_bytes(built, program):
    """The writer, fed what the reader found, reproduces the file executorch wrote."""
    ptd = read_ptd(built.ptd(program))
    layouts = read_tensor_layouts(ptd.path)
    segments = {e.segment_index: FileSegment(ptd.path, e.offset, e.size) for e in ptd.entries.values()}
    named = [NamedData(k, e.segment_index, layouts[k]) for k, e in ptd.entries.items()]
    assert serialize_ptd([segments[i] for i in range(len(segments))], named) == ptd.path.read_bytes()


def test_a_source_may_be_the_destination(built, tmp_path):
    dest = tmp_path / "w.ptd"
    dest.write_bytes(built.ptd("tiny_portable").read_bytes())
    merge_ptd([dest, built.ptd("tiny_xnnpack")], dest)
    assert dest.read_bytes() == built.merged.read_bytes()


def test_every_truncation_of_a_merged_file_is_refused(built, tmp_path):
    raw = built.merged.read_bytes()
    cut = tmp_path / "cut.ptd"
    for length in range(len(raw)):
        cut.write_bytes(raw[:length])
        with pytest.raises(FormatError, match=f"^{cut}: "):
            read_ptd(cut)


LAYOUT = TensorLayout(ScalarType.FLOAT, (2,), (0,))


def ptd(path: Path, entries: dict[str, tuple[bytes, TensorLayout | None]]) -> Path:
    """A .ptd with one segment per distinct blob, written by our writer."""
    blobs = list(dict.fromkeys(blob for blob, _ in entries.values()))
    named = [NamedData(key, blobs.index(blob), layout) for key, (blob, layout) in entries.items()]
    write_ptd_file(path, [BytesSegment(b) for b in blobs], named)
    return path


def test_equal_bytes_under_different_keys_are_stored_once(tmp_path):
    same, other, third = b"s" * 8, b"o" * 8, b"t" * 200
    a = ptd(tmp_path / "a.ptd", {"w@a": (same, LAYOUT), "x": (other, None)})
    b = ptd(tmp_path / "b.ptd", {"w@b": (same, None), "y": (third, None), "x": (other, None)})
    report = merge_ptd([a, b], tmp_path / "m.ptd")
    merged = read_ptd(tmp_path / "m.ptd")
    assert list(merged.entries) == ["w@a", "w@b", "x", "y"]
    assert merged.entries["w@a"].segment_index == merged.entries["w@b"].segment_index == 0
    assert merged.entries["w@a"].offset == merged.entries["w@b"].offset
    assert [merged.entries[k].segment_index for k in ("x", "y")] == [1, 2]
    assert dict(read_tensor_layouts(tmp_path / "m.ptd")) == {"w@a": LAYOUT, "w@b": None, "x": None, "y": None}
    assert (report.keys, report.segments, report.blob_bytes, report.bytes_saved) == (4, 3, 216, 8)
    assert report.source_blob_bytes == 16 + 216


CONFLICTS = {
    "bytes": ({"k": (b"1234", None)}, {"k": (b"1235", None)},
              r"key 'k' has different bytes in {a} \(4 bytes, sha256:{da}\) and {b} \(4 bytes, sha256:{db}\)"),
    "layout": ({"k": (b"1234", LAYOUT)}, {"k": (b"1234", TensorLayout(ScalarType.INT, (2,), (0,)))},
               r"key 'k' has different tensor layouts in {a} \(FLOAT sizes \[2\] dim_order \[0\]\) "
               r"and {b} \(INT sizes \[2\] dim_order \[0\]\)"),
    "layout missing": ({"k": (b"1234", LAYOUT)}, {"k": (b"1234", None)},
                       r"key 'k' has different tensor layouts in {a} \(FLOAT sizes \[2\] dim_order \[0\]\) "
                       r"and {b} \(no layout\)"),
}


@pytest.mark.parametrize("first, second, message", CONFLICTS.values(), ids=CONFLICTS.keys())
def test_a_conflicting_key_is_refused(tmp_path, first, second, message):
    a = ptd(tmp_path / "a.ptd", {"same": (b"s", None), **first})
    b = ptd(tmp_path / "b.ptd", {"same": (b"s", None), **second})
    dest = tmp_path / "m.ptd"
    expected = message.format(
        a=a, b=b,
        da=hashlib.sha256(first["k"][0]).hexdigest(), db=hashlib.sha256(second["k"][0]).hexdigest(),
    )
    with pytest.raises(FormatError, match=f"^{dest}: cannot merge: {expected}$"):
        merge_ptd([a, b], dest)
    assert not dest.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.ptd", "b.ptd"]


def test_a_bad_source_is_named(tmp_path, built):
    bad = tmp_path / "bad.ptd"
    bad.write_bytes(built.merged.read_bytes()[:100])
    with pytest.raises(FormatError, match=f"^{bad}: truncated"):
        merge_ptd([built.ptd("tiny_portable"), bad], tmp_path / "m.ptd")


def test_nothing_to_merge(tmp_path):
    with pytest.raises(ValueError, match="nothing to merge"):
        merge_ptd([], tmp_path / "m.ptd")


def test_every_flipped_flatbuffer_byte_of_a_merged_file_is_read_or_refused(built, tmp_path):
    """Layouts are read with the same checks: corruption is a FormatError, never IndexError."""
    raw = built.merged.read_bytes()
    bad = tmp_path / "bad.ptd"
    for corrupt in flatbuffer_flips(raw):
        bad.write_bytes(corrupt)
        try:
            read_tensor_layouts(bad)
        except FormatError:
            pass


blobs = st.binary(max_size=64)
catalogue = st.dictionaries(
    st.text("abcxyz@:", min_size=1, max_size=6),
    st.tuples(st.sampled_from([b"", b"w" * 8, b"v" * 8]) | blobs, st.none() | st.just(LAYOUT)),
    min_size=1, max_size=10,
)


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=catalogue, data=st.data())
def test_merge_keeps_every_key_and_stores_each_content_once(tmp_path, entries, data):
    """Sources drawn from one catalogue never conflict; the merge is their union."""
    sources = []
    for i in range(data.draw(st.integers(1, 3))):
        chosen = data.draw(st.lists(st.sampled_from(sorted(entries)), min_size=1, unique=True))
        sources.append(ptd(tmp_path / f"s{i}.ptd", {k: entries[k] for k in chosen}))
    dest = tmp_path / "m.ptd"
    report = merge_ptd(sources, dest)
    union = sorted({k for s in sources for k in read_ptd(s).keys})
    merged = read_ptd(dest)
    assert list(merged.entries) == union
    assert dict(read_tensor_layouts(dest)) == {k: entries[k][1] for k in union}
    assert {k: merged.read_blob(k) for k in union} == {k: entries[k][0] for k in union}
    assert report.segments == len({entries[k][0] for k in union}) == len(set(merged.sha256_by_segment()))
    assert merge_ptd(list(reversed(sources)), tmp_path / "again.ptd").file_size == report.file_size
    assert (tmp_path / "again.ptd").read_bytes() == dest.read_bytes()
