"""Writing .ptd (FlatTensor) files: read back by our reader, and byte-identical to executorch's writer."""

from __future__ import annotations

import hashlib
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ptebuild.errors import FormatError
from ptebuild.runtime.ptd_file import ScalarType, TensorLayout, read_ptd, read_tensor_layouts
from ptebuild.runtime.ptd_write import (
    BytesSegment,
    FileSegment,
    NamedData,
    plan_ptd,
    serialize_ptd,
    write_ptd_file,
)

# Keys as executorch and ptebuild write them are ASCII, but the format takes any UTF-8.
keys = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
layouts = st.none() | st.builds(
    TensorLayout,
    scalar_type=st.sampled_from(ScalarType),
    sizes=st.lists(st.integers(-(1 << 31), (1 << 31) - 1), max_size=5).map(tuple),
    dim_order=st.lists(st.integers(0, 255), max_size=5).map(tuple),
)
alignments = st.sampled_from([1, 2, 16, 64, 128, 256, 1024])


@st.composite
def payloads(draw) -> list[tuple[str, int, int, TensorLayout | None]]:
    """Named data as executorch takes it: ``(key, buffer index, alignment, layout)``, and the buffers."""
    buffers = draw(st.lists(st.binary(max_size=300), min_size=1, max_size=6))
    names = draw(st.lists(keys, unique=True, max_size=8))
    entries = [
        (name, draw(st.integers(0, len(buffers) - 1)), draw(alignments), draw(layouts))
        for name in names
    ]
    return buffers, entries


def as_ptebuild(buffers, entries) -> tuple[list[BytesSegment], list[NamedData]]:
    """What executorch's serializer does first: one segment per buffer, in order of first use."""
    segment_of: dict[int, int] = {}
    segments, named = [], []
    for key, buffer, alignment, layout in entries:
        if buffer not in segment_of:
            segment_of[buffer] = len(segments)
            segments.append(BytesSegment(buffers[buffer], alignment))
        named.append(NamedData(key, segment_of[buffer], layout))
    return segments, named


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=payloads())
def test_round_trip(tmp_path, payload):
    segments, named = as_ptebuild(*payload)
    path = tmp_path / "rt.ptd"
    plan = write_ptd_file(path, segments, named)
    assert path.stat().st_size == plan.file_size
    ptd = read_ptd(path)
    assert ptd.version == 0
    assert list(ptd.entries) == [n.key for n in named]
    assert dict(read_tensor_layouts(path)) == {n.key: n.layout for n in named}
    for n in named:
        entry = ptd.entries[n.key]
        assert entry.segment_index == n.segment
        assert ptd.read_blob(n.key) == segments[n.segment].data
        assert (entry.offset - plan.segment_base) % segments[n.segment].alignment == 0
        assert (entry.offset - plan.segment_base) % 128 == 0
    assert ptd.sha256_by_segment() == {
        n.segment: hashlib.sha256(segments[n.segment].data).hexdigest() for n in named
    }


@pytest.fixture(scope="module")
def flat_tensor():
    """executorch's own writer (its import takes seconds: once per module)."""
    from executorch.exir._serialize.data_serializer import DataEntry, DataPayload
    from executorch.exir.scalar_type import ScalarType as EtScalarType
    from executorch.exir.tensor_layout import TensorLayout as EtTensorLayout
    from executorch.extension.flat_tensor.serialize.serialize import FlatTensorSerializer

    def serialize(buffers, entries) -> bytes:
        named = {
            key: DataEntry(
                buffer_index=buffer,
                alignment=alignment,
                tensor_layout=None
                if layout is None
                else EtTensorLayout(EtScalarType(layout.scalar_type), list(layout.sizes), list(layout.dim_order)),
            )
            for key, buffer, alignment, layout in entries
        }
        return bytes(FlatTensorSerializer().serialize(DataPayload(buffers=list(buffers), named_data=named)))

    return serialize


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=payloads())
def test_byte_identical_to_executorch(flat_tensor, payload):
    assert serialize_ptd(*as_ptebuild(*payload)) == flat_tensor(*payload)


LAYOUT = TensorLayout(ScalarType.FLOAT, (2, 3), (0, 1))
EXAMPLES = {
    "empty": ([], []),
    "one float tensor": ([b"\1" * 24], [("w", 0, 1, LAYOUT)]),
    "two keys, one buffer, no layout": ([b"abc"], [("b", 0, 16, None), ("a", 0, 1, None)]),
    "default scalar type and empty vectors": ([b""], [("", 0, 1, TensorLayout(ScalarType.BYTE, (), ()))]),
    "alignment above the segment alignment": (
        [b"x" * 130, b"y"], [("x", 0, 1, None), ("y", 1, 512, LAYOUT)],
    ),
}


@pytest.mark.parametrize("buffers, entries", EXAMPLES.values(), ids=EXAMPLES.keys())
def test_examples_byte_identical_to_executorch(flat_tensor, buffers, entries):
    assert serialize_ptd(*as_ptebuild(buffers, entries)) == flat_tensor(buffers, entries)


BAD = [
    ("duplicate key", [BytesSegment(b"a")], [NamedData("k", 0), NamedData("k", 0)],
     r"named_data\[1\] \('k'\): key appears twice"),
    ("segment out of range", [BytesSegment(b"a")], [NamedData("k", 1)],
     r"named_data\[0\] \('k'\): segment 1 out of range, 1 segments"),
    ("zero alignment", [BytesSegment(b"a", 0)], [NamedData("k", 0)],
     r"segments\[0\]\.alignment must be a positive integer, not 0"),
    ("size beyond int32", [BytesSegment(b"a")], [NamedData("k", 0, TensorLayout(ScalarType.FLOAT, (1 << 31,), (0,)))],
     r"named_data\[0\] \('k'\): sizes \(2147483648,\) do not fit int32"),
    ("dim_order beyond uint8", [BytesSegment(b"a")], [NamedData("k", 0, TensorLayout(ScalarType.FLOAT, (1,), (256,)))],
     r"named_data\[0\] \('k'\): dim_order \(256,\) does not fit uint8"),
    ("unknown scalar type", [BytesSegment(b"a")], [NamedData("k", 0, TensorLayout(8, (1,), (0,)))],
     r"named_data\[0\] \('k'\): scalar type 8 is not a ScalarType"),
]


@pytest.mark.parametrize("segments, named, message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_arguments(segments, named, message):
    with pytest.raises(ValueError, match=message):
        plan_ptd(segments, named)


def test_file_segments_are_streamed_from_their_file(tmp_path):
    source = tmp_path / "blobs.bin"
    source.write_bytes(b"-" * 10 + b"payload" + b"-" * 10)
    digest = hashlib.sha256(b"payload").hexdigest()
    dest = tmp_path / "out.ptd"
    write_ptd_file(dest, [FileSegment(source, 10, 7, sha256=digest)], [NamedData("p", 0)])
    assert read_ptd(dest).read_blob("p") == b"payload"


@pytest.mark.parametrize(
    "segment, message",
    [
        (lambda src: FileSegment(src, 10, 7, sha256="0" * 64), r"blob at offset 10 changed while being copied"),
        (lambda src: FileSegment(src, 20, 70), r"truncated: blob of 70 bytes at offset 20"),
    ],
    ids=["changed", "short"],
)
def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, segment, message):
    source = tmp_path / "blobs.bin"
    source.write_bytes(b"-" * 10 + b"payload" + b"-" * 10)
    dest = tmp_path / "out.ptd"
    dest.write_bytes(b"old")
    with pytest.raises(FormatError, match=f"^{source}: {message}"):
        write_ptd_file(dest, [BytesSegment(b"first"), segment(source)], [NamedData("a", 0), NamedData("b", 1)])
    assert dest.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["blobs.bin", "out.ptd"]


def test_written_file_mode(tmp_path):
    dest = tmp_path / "out.ptd"
    write_ptd_file(dest, [], [])
    assert dest.stat().st_mode & 0o777 == 0o644
    assert read_ptd(dest).entries == {}


def test_an_unknown_scalar_type_in_a_file_is_a_format_error(tmp_path, monkeypatch):
    from ptebuild.runtime import ptd_write

    monkeypatch.setattr(ptd_write, "_check", lambda *args: None)
    bad = tmp_path / "bad.ptd"
    write_ptd_file(bad, [BytesSegment(b"a")], [NamedData("k", 0, TensorLayout(8, (1,), (0,)))])
    with pytest.raises(FormatError, match=rf"^{bad}: FlatTensor\.named_data\[0\]\.tensor_layout of key 'k': unknown scalar type 8$"):
        read_tensor_layouts(bad)
