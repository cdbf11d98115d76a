"""Writes ``.ptd`` (ExecuTorch FlatTensor) files, byte for byte as executorch 1.5.1 does.

Pure Python; imports neither torch nor executorch. The reader, :mod:`.ptd_file`, documents
the layout; this module reproduces executorch's writer
(``extension/flat_tensor/serialize/serialize.py``, ``FlatTensorSerializer.serialize``, with
the default ``FlatTensorConfig``), whose flatbuffer comes from ``flatc --binary`` fed JSON.
Given the same named data, segments in the same order, :func:`serialize_ptd` returns the
same bytes (tested against ``FlatTensorSerializer``).

File, little-endian:

====================  ==========================================================
0..4                  u32 offset of the root ``FlatTensor`` table (+ 48, see below)
4..8                  ``FT01``
8..48                 header ``FH01``, u32 40, u64 flatbuffer_offset = 48,
                      u64 flatbuffer_size = len(flatbuffer), u64 segment_base_offset,
                      u64 segment_data_size; zero-padded from 40 to 48 bytes
                      (``_FLATBUFFER_ALIGNMENT`` = 16)
48..                  ``flatbuffer[8:]``: the 48 header bytes are spliced in after the
                      identifier, so every relative offset in it still holds
..segment_base        zeros up to ``segment_base_offset = align(48 + len(flatbuffer),
                      segment_alignment)``
segment data          segment ``i`` at ``align(end of segment i-1, lcm(segment_alignment,
                      alignment of i))`` from the base, zero padding between, none after
                      the last; ``segment_data_size`` is the end of the last segment
====================  ==========================================================

``FlatTensor.version`` is 0, the only version executorch 1.5.1 reads and writes.

The flatbuffer is built by hand rather than with the ``flatbuffers`` package: byte identity
with executorch means replaying the exact build order of flatc's JSON parser, and the
package's builder is no help with that while adding a dependency ptebuild does not declare.
flatc builds back to front, every object when its JSON value ends: a string when it is
parsed, a vector after its elements, a table after its fields' values; a table's fields are
pushed largest first (8, 4, 2, 1 bytes; offsets count 4), ties in reverse field order;
scalars equal to their default (0) are left out; vtables are shared when byte-equal; ``null``
leaves a field out. :class:`_BackToFrontBuilder` does exactly that, for this schema only.

Segments are streamed: :func:`write_ptd` holds the flatbuffer (keys and layouts only) in
memory, never the blobs; a :class:`FileSegment` is copied from its file 1 MiB at a time.
"""

from __future__ import annotations

import io
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from ptebuild.errors import FormatError
from ptebuild.hashing import ShortRead, hash_chunks, read_range
from ptebuild.runtime.ptd_file import (
    FILE_IDENTIFIER,
    HEADER,
    HEADER_MAGIC,
    HEADER_OFFSET,
    SUPPORTED_VERSION,
    ScalarType,
    TensorLayout,
)

DEFAULT_SEGMENT_ALIGNMENT = 128
"""``FlatTensorConfig.segment_alignment``, executorch's default and what ptebuild's builds use."""

_FLATBUFFER_ALIGNMENT = 16
_PADDED_HEADER_SIZE = -(-HEADER.size // _FLATBUFFER_ALIGNMENT) * _FLATBUFFER_ALIGNMENT  # 48

_U8 = struct.Struct("<B")
_I8 = struct.Struct("<b")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_OFFSET = struct.Struct("<I")  # distinct from _U32: a field holding an offset to a string, vector or table


class Segment(Protocol):
    """One blob of segment data: its size, the alignment it asks for, and how to copy it out."""

    @property
    def size(self) -> int: ...

    @property
    def alignment(self) -> int: ...

    def write_to(self, out: BinaryIO) -> None:
        """Writes exactly ``size`` bytes to ``out``."""


@dataclass(frozen=True)
class BytesSegment:
    """A segment held in memory."""

    data: bytes
    alignment: int = 1

    @property
    def size(self) -> int:
        return len(self.data)

    def write_to(self, out: BinaryIO) -> None:
        out.write(self.data)


@dataclass(frozen=True)
class FileSegment:
    """``size`` bytes at ``offset`` of ``path``, streamed when written.

    With ``sha256`` (hex), the bytes are hashed as they are copied and a mismatch (the file
    changed since it was hashed) is a :class:`FormatError`, as is a file now too short.
    """

    path: Path
    offset: int
    size: int
    alignment: int = 1
    sha256: str | None = None

    def write_to(self, out: BinaryIO) -> None:
        with open(self.path, "rb") as f:
            try:
                digest, _ = hash_chunks(read_range(f, self.offset, self.size), out.write)
            except ShortRead:
                raise FormatError(
                    f"{self.path}: truncated: blob of {self.size} bytes at offset "
                    f"{self.offset} ends past the end of the file"
                ) from None
        if self.sha256 is not None and digest != self.sha256:
            raise FormatError(
                f"{self.path}: blob at offset {self.offset} changed while being copied "
                f"(sha256:{digest}, expected sha256:{self.sha256})"
            )


@dataclass(frozen=True)
class NamedData:
    """One key of the file: ``FlatTensor.named_data[i]``, pointing at ``segments[segment]``."""

    key: str
    segment: int
    layout: TensorLayout | None = None


@dataclass(frozen=True)
class PtdPlan:
    """Where everything goes: the bytes before the segments and each segment's offset."""

    head: bytes
    """Root offset, identifier, header, flatbuffer and padding: bytes ``[0, segment_base)``."""
    segment_offsets: tuple[int, ...]
    """Each segment's offset from ``segment_base`` (``DataSegment.offset``)."""
    segment_data_size: int

    @property
    def segment_base(self) -> int:
        return len(self.head)

    @property
    def file_size(self) -> int:
        return self.segment_base + self.segment_data_size


def plan_ptd(
    segments: Sequence[Segment],
    named_data: Sequence[NamedData],
    *,
    segment_alignment: int = DEFAULT_SEGMENT_ALIGNMENT,
) -> PtdPlan:
    """Lays out a ``.ptd`` holding ``segments`` (in this order) and ``named_data`` (in this order).

    Raises:
        ValueError: a key appears twice, an entry points at no segment, a layout does not fit
            its field types, or an alignment is not a positive integer.
    """
    _check(segments, named_data, segment_alignment)
    offsets = []
    end = 0
    for segment in segments:
        offset = _align(end, math.lcm(segment_alignment, segment.alignment))
        offsets.append(offset)
        end = offset + segment.size
    flatbuffer = _flat_tensor(
        [(offset, segment.size) for offset, segment in zip(offsets, segments)], named_data
    )
    segment_base = _align(_PADDED_HEADER_SIZE + len(flatbuffer), segment_alignment)
    header = HEADER.pack(
        HEADER_MAGIC, HEADER.size, _PADDED_HEADER_SIZE, len(flatbuffer), segment_base, end
    ).ljust(_PADDED_HEADER_SIZE, b"\0")
    (root,) = _U32.unpack_from(flatbuffer, 0)
    head = b"".join(
        (
            _U32.pack(root + len(header)),
            flatbuffer[4:HEADER_OFFSET],
            header,
            flatbuffer[HEADER_OFFSET:],
        )
    ).ljust(segment_base, b"\0")
    return PtdPlan(head, tuple(offsets), end)


def write_ptd(
    out: BinaryIO,
    segments: Sequence[Segment],
    named_data: Sequence[NamedData],
    *,
    segment_alignment: int = DEFAULT_SEGMENT_ALIGNMENT,
) -> PtdPlan:
    """Writes the ``.ptd`` of :func:`plan_ptd` to ``out``, streaming the segments; returns the plan.

    Raises:
        ValueError: as :func:`plan_ptd`.
        FormatError: a :class:`FileSegment` is short or changed.
        OSError: writing or reading a segment failed.
    """
    plan = plan_ptd(segments, named_data, segment_alignment=segment_alignment)
    out.write(plan.head)
    written = 0
    for offset, segment in zip(plan.segment_offsets, segments):
        out.write(b"\0" * (offset - written))
        segment.write_to(out)
        written = offset + segment.size
    return plan


def serialize_ptd(
    segments: Sequence[Segment],
    named_data: Sequence[NamedData],
    *,
    segment_alignment: int = DEFAULT_SEGMENT_ALIGNMENT,
) -> bytes:
    """The bytes of :func:`write_ptd`, in memory (for small files and tests)."""
    buffer = io.BytesIO()
    write_ptd(buffer, segments, named_data, segment_alignment=segment_alignment)
    return buffer.getvalue()


def write_ptd_file(
    dest: Path,
    segments: Sequence[Segment],
    named_data: Sequence[NamedData],
    *,
    segment_alignment: int = DEFAULT_SEGMENT_ALIGNMENT,
    mode: int = 0o644,
) -> PtdPlan:
    """Writes a ``.ptd`` to ``dest`` atomically: a temporary file in its folder, fsync, ``os.replace``.

    Readers, and a process killed at any moment, see the old file or the whole new one; the
    temporary file never stays. Raises as :func:`write_ptd`.
    """
    from ptebuild.atomic import atomic_output

    with atomic_output(Path(dest), mode=mode) as out:
        plan = write_ptd(out, segments, named_data, segment_alignment=segment_alignment)
    return plan


def _align(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def _check(segments: Sequence[Segment], named_data: Sequence[NamedData], segment_alignment: int) -> None:
    for what, alignment in [("segment_alignment", segment_alignment)] + [
        (f"segments[{i}].alignment", s.alignment) for i, s in enumerate(segments)
    ]:
        if not isinstance(alignment, int) or alignment < 1:
            raise ValueError(f"{what} must be a positive integer, not {alignment!r}")
    seen = set()
    for i, named in enumerate(named_data):
        where = f"named_data[{i}] ({named.key!r})"
        if named.key in seen:
            raise ValueError(f"{where}: key appears twice")
        seen.add(named.key)
        if not 0 <= named.segment < len(segments):
            raise ValueError(f"{where}: segment {named.segment} out of range, {len(segments)} segments")
        layout = named.layout
        if layout is None:
            continue
        if layout.scalar_type not in ScalarType.__members__.values():
            raise ValueError(f"{where}: scalar type {layout.scalar_type!r} is not a ScalarType")
        if any(not -(1 << 31) <= size < 1 << 31 for size in layout.sizes):
            raise ValueError(f"{where}: sizes {layout.sizes} do not fit int32")
        if any(not 0 <= dim < 256 for dim in layout.dim_order):
            raise ValueError(f"{where}: dim_order {layout.dim_order} does not fit uint8")


def _flat_tensor(segments: Sequence[tuple[int, int]], named_data: Sequence[NamedData]) -> bytes:
    """The ``FlatTensor`` flatbuffer, in flatc's build order (see the module docstring)."""
    b = _BackToFrontBuilder()
    # JSON order: version, segments, named_data; each object is built when its value ends.
    segment_tables = [b.table([(0, _U64, offset), (1, _U64, size)]) for offset, size in segments]
    segments_vector = b.offsets_vector(segment_tables)
    named_tables = []
    for named in named_data:
        key = b.string(named.key)
        fields = [(0, _OFFSET, key), (1, _U32, named.segment)]
        if named.layout is not None:
            fields.append((2, _OFFSET, _tensor_layout(b, named.layout)))
        named_tables.append(b.table(fields))
    named_vector = b.offsets_vector(named_tables)
    root = b.table([(0, _U32, SUPPORTED_VERSION), (1, _OFFSET, segments_vector), (2, _OFFSET, named_vector)])
    return b.finish(root, FILE_IDENTIFIER)


def _tensor_layout(b: _BackToFrontBuilder, layout: TensorLayout) -> int:
    sizes = b.scalars_vector(_I32, layout.sizes)
    dim_order = b.scalars_vector(_U8, layout.dim_order)
    return b.table([(0, _I8, int(layout.scalar_type)), (1, _OFFSET, sizes), (2, _OFFSET, dim_order)])


class _BackToFrontBuilder:
    """The few calls of flatc's ``FlatBufferBuilder`` this schema needs, with its exact padding.

    Bytes are prepended (kept as a reversed list of chunks); an object is named by its
    distance from the end of the buffer, as in flatbuffers.
    """

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._size = 0
        self._minalign = 1
        self._vtables: dict[bytes, int] = {}

    def _push(self, data: bytes) -> None:
        self._chunks.append(data)
        self._size += len(data)

    def _prealign(self, length: int, alignment: int) -> None:
        """Pads so that ``length`` more bytes end aligned (``FlatBufferBuilder::PreAlign``)."""
        self._minalign = max(self._minalign, alignment)
        self._push(b"\0" * ((-(self._size + length)) % alignment))

    def _scalar(self, fmt: struct.Struct, value: int) -> int:
        self._prealign(0, fmt.size)
        self._push(fmt.pack(value))
        return self._size

    def _refer_to(self, ref: int) -> int:
        self._prealign(0, _OFFSET.size)
        return self._size - ref + _OFFSET.size

    def string(self, text: str) -> int:
        data = text.encode("utf-8")
        self._prealign(len(data) + 1, _U32.size)
        self._push(data + b"\0")
        return self._scalar(_U32, len(data))

    def scalars_vector(self, fmt: struct.Struct, values: Sequence[int]) -> int:
        body = b"".join(fmt.pack(v) for v in values)
        if body:  # PreAlign is a no-op for an empty vector; EndVector's length aligns it
            self._prealign(len(body), _U32.size)
            self._prealign(len(body), fmt.size)
        self._push(body)
        return self._scalar(_U32, len(values))

    def offsets_vector(self, refs: Sequence[int]) -> int:
        if refs:
            self._prealign(len(refs) * _OFFSET.size, _U32.size)
        for ref in reversed(refs):
            self._push(_OFFSET.pack(self._refer_to(ref)))
        return self._scalar(_U32, len(refs))

    def table(self, fields: Sequence[tuple[int, struct.Struct, int]]) -> int:
        """Builds a table from ``(field index, format, value)``; ``_OFFSET`` values are refs."""
        start = self._size
        locations: dict[int, int] = {}
        order = sorted(fields, key=lambda f: (f[1].size, f[0]), reverse=True)
        for index, fmt, value in order:
            if fmt is _OFFSET:
                value = self._refer_to(value)
            elif value == 0:  # a scalar equal to its default is not written
                continue
            locations[index] = self._scalar(fmt, value)
        self._prealign(0, _I32.size)
        table = self._size + _I32.size
        entries = [0] * (max(locations, default=-1) + 1)
        for index, location in locations.items():
            entries[index] = table - location
        vtable = struct.pack(
            f"<HH{len(entries)}H", 2 * (2 + len(entries)), table - start, *entries
        )
        vtable_ref = self._vtables.get(vtable)
        if vtable_ref is None:
            vtable_ref = table + len(vtable)
            self._vtables[vtable] = vtable_ref
            self._push(_I32.pack(vtable_ref - table))
            self._push(vtable)
        else:
            self._push(_I32.pack(vtable_ref - table))
        return table

    def finish(self, root: int, identifier: bytes) -> bytes:
        self._prealign(_U32.size + len(identifier), self._minalign)
        self._push(identifier)
        self._push(_OFFSET.pack(self._refer_to(root)))
        return b"".join(reversed(self._chunks))
