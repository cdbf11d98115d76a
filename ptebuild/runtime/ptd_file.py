"""Reads a ``.ptd`` (ExecuTorch FlatTensor) file: its keys, where each blob lives, its bytes.

Pure Python; imports neither torch nor executorch. Only the header and the flatbuffer are
read up front; blobs are read (or hashed, streaming) one at a time on request.

Spec: executorch ``extension/flat_tensor/serialize/flat_tensor.fbs`` (schema, file
identifier ``FT01``) and ``serialize.py`` / ``flat_tensor_header.h`` (header). Layout,
little-endian, offsets from the start of the file:

====================  ==========================================================
0..4                  u32 offset of the root ``FlatTensor`` table
4..8                  file identifier ``FT01``
8..48                 header: ``FH01``, u32 header length (>= 40),
                      u64 flatbuffer_offset, u64 flatbuffer_size,
                      u64 segment_base_offset, u64 segment_data_size;
                      padded to 16 bytes
48..                  rest of the flatbuffer; the flatbuffer spans
                      ``[0, flatbuffer_offset + flatbuffer_size)`` and its offsets
                      are relative to byte 0 (the header was spliced in after the
                      identifier and the root offset adjusted)
segment_base_offset   segment data: ``FlatTensor.segments[i]`` is
                      ``[base + offset, base + offset + size)``
====================  ==========================================================

Tables read (field index: name): ``FlatTensor`` {0: version u32, 1: segments [DataSegment],
2: named_data [NamedData]}; ``DataSegment`` {0: offset u64, 1: size u64}; ``NamedData``
{0: key string, 1: segment_index u32, 2: tensor_layout}; ``TensorLayout`` {0: scalar_type i8,
1: sizes [int32], 2: dim_order [uint8]} (read by :func:`read_tensor_layouts`). Several keys may
share a segment.
Only schema version 0 (executorch 1.5.1) is accepted.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from types import MappingProxyType

from ptebuild.errors import FormatError
from ptebuild.runtime.file_region import file_size, read_exact, sha256_of_range
from ptebuild.runtime.flatbuffer import U32, U64, FlatbufferView

FILE_IDENTIFIER = b"FT01"
HEADER_MAGIC = b"FH01"
SUPPORTED_VERSION = 0
# At byte 8: magic, header length, flatbuffer offset/size, segment base offset, data size.
HEADER = struct.Struct("<4sIQQQQ")
HEADER_OFFSET = 8
_IDENTIFIER_SLICE = slice(4, 8)


@dataclass(frozen=True)
class PtdEntry:
    """One key of a ``.ptd``: its blob is ``size`` bytes at absolute file ``offset``."""

    key: str
    offset: int
    size: int
    segment_index: int


@dataclass(frozen=True)
class PtdFile:
    """What a ``.ptd`` holds. ``entries`` maps each key to where its bytes are."""

    path: Path
    version: int
    entries: Mapping[str, PtdEntry]

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(self.entries)

    def read_blob(self, key: str) -> bytes:
        """Returns the bytes stored under ``key`` (KeyError if the file has no such key)."""
        entry = self.entries[key]
        with open(self.path, "rb") as f:
            return read_exact(f, str(self.path), entry.offset, entry.size, f"blob of {key!r}")

    def sha256_by_segment(self) -> dict[int, str]:
        """Hashes every segment once (streaming) and returns ``{segment_index: hex digest}``."""
        digests: dict[int, str] = {}
        with open(self.path, "rb") as f:
            for entry in self.entries.values():
                if entry.segment_index not in digests:
                    digests[entry.segment_index] = sha256_of_range(
                        f, str(self.path), entry.offset, entry.size, f"blob of {entry.key!r}"
                    )
        return digests


@dataclass(frozen=True)
class PtdHeader:
    """The FlatTensor header (bytes 8..48) as stored, and the size of the file it was read from.

    :func:`read_ptd_header` reads it without checking it; :func:`read_ptd` checks the same
    bytes (magic, length, segment data inside the file).
    """

    magic: bytes
    length: int
    flatbuffer_offset: int
    flatbuffer_size: int
    segment_base: int
    segment_data_size: int
    file_size: int


def read_ptd_header(path: str | Path) -> PtdHeader:
    """Reads the header of a ``.ptd``.

    Raises:
        FormatError: the file is too short to hold the header.
        OSError: the file cannot be opened.
    """
    with open(path, "rb") as f:
        size = file_size(f)
        head = read_exact(f, str(path), 0, HEADER_OFFSET + HEADER.size, "FlatTensor header")
    magic, length, fb_offset, fb_size, segment_base, segment_data_size = HEADER.unpack_from(head, HEADER_OFFSET)
    return PtdHeader(magic, length, fb_offset, fb_size, segment_base, segment_data_size, file_size=size)


def read_ptd(path: str | Path) -> PtdFile:
    """Reads the header and flatbuffer of a ``.ptd``.

    Raises:
        FormatError: not a FlatTensor file, an unsupported version, or truncated/corrupt;
            the message names the file, the field and the offset.
        OSError: the file cannot be opened.
    """
    path = Path(path)
    source = str(path)
    with open(path, "rb") as f:
        size = file_size(f)
        head = read_exact(f, source, 0, HEADER_OFFSET + HEADER.size, "FlatTensor header")
        identifier = head[_IDENTIFIER_SLICE]
        if identifier != FILE_IDENTIFIER:
            raise FormatError(
                f"{source}: not a .ptd file: identifier {identifier!r} at offset 4, "
                f"expected {FILE_IDENTIFIER!r}"
            )
        magic, length, fb_offset, fb_size, segment_base, segment_data_size = HEADER.unpack_from(
            head, HEADER_OFFSET
        )
        if magic != HEADER_MAGIC or length < HEADER.size:
            raise FormatError(
                f"{source}: bad FlatTensor header at offset {HEADER_OFFSET}: magic {magic!r} "
                f"length {length} (expected {HEADER_MAGIC!r}, length >= {HEADER.size})"
            )
        if segment_base + segment_data_size > size:
            raise FormatError(
                f"{source}: truncated: segment data ends at offset "
                f"{segment_base + segment_data_size}, file has {size} bytes"
            )
        flatbuffer = read_exact(f, source, 0, fb_offset + fb_size, "FlatTensor flatbuffer")
    return PtdFile(path, *_parse_flat_tensor(flatbuffer, source, segment_base, segment_data_size))


def _parse_flat_tensor(
    flatbuffer: bytes, source: str, segment_base: int, segment_data_size: int
) -> tuple[int, Mapping[str, PtdEntry]]:
    root = FlatbufferView(flatbuffer, source).root("FlatTensor")
    version = root.scalar(0, "version", U32)
    if version != SUPPORTED_VERSION:
        raise FormatError(
            f"{source}: FlatTensor schema version {version}; ptebuild reads version "
            f"{SUPPORTED_VERSION} (executorch 1.5.1)"
        )
    segments = []
    for segment in root.tables(1, "segments"):
        offset = segment.scalar(0, "offset", U64)
        length = segment.scalar(1, "size", U64)
        if offset + length > segment_data_size:
            raise FormatError(
                f"{source}: {segment.path} [{offset}, {offset + length}) lies outside the "
                f"{segment_data_size} bytes of segment data"
            )
        segments.append((segment_base + offset, length))
    entries: dict[str, PtdEntry] = {}
    for named in root.tables(2, "named_data"):
        key = named.string(0, "key")
        index = named.scalar(1, "segment_index", U32)
        if key is None:
            raise FormatError(f"{source}: {named.path} has no key")
        if index >= len(segments):
            raise FormatError(
                f"{source}: {named.path} ({key!r}) points at segment {index}, "
                f"file has {len(segments)}"
            )
        if key in entries:
            raise FormatError(f"{source}: key {key!r} appears twice")
        entries[key] = PtdEntry(key, *segments[index], segment_index=index)
    return version, MappingProxyType(entries)


class ScalarType(IntEnum):
    """``executorch_flatbuffer.ScalarType`` (executorch ``scalar_type.fbs``), an i8 on the wire."""

    BYTE = 0
    CHAR = 1
    SHORT = 2
    INT = 3
    LONG = 4
    HALF = 5
    FLOAT = 6
    DOUBLE = 7
    BOOL = 11
    QINT8 = 12
    QUINT8 = 13
    QINT32 = 14
    BFLOAT16 = 15
    QUINT4X2 = 16
    QUINT2X4 = 17
    BITS16 = 22
    FLOAT8E5M2 = 23
    FLOAT8E4M3FN = 24
    FLOAT8E5M2FNUZ = 25
    FLOAT8E4M3FNUZ = 26
    UINT16 = 27
    UINT32 = 28
    UINT64 = 29


@dataclass(frozen=True)
class TensorLayout:
    """``NamedData.tensor_layout`` (table fields 0: scalar_type i8, 1: sizes [int32], 2: dim_order [uint8])."""

    scalar_type: ScalarType
    sizes: tuple[int, ...]
    dim_order: tuple[int, ...]


_I8 = struct.Struct("<b")
_I32 = struct.Struct("<i")


def read_tensor_layouts(path: str | Path) -> Mapping[str, TensorLayout | None]:
    """Returns each key's tensor layout (None where the entry has none), in file order.

    Reads the file with :func:`read_ptd` first, so every check of that function applies.

    Raises:
        FormatError: as :func:`read_ptd`, or a layout names an unknown scalar type.
        OSError: the file cannot be opened.
    """
    ptd = read_ptd(path)
    source = str(ptd.path)
    with open(ptd.path, "rb") as f:
        head = read_exact(f, source, 0, HEADER_OFFSET + HEADER.size, "FlatTensor header")
        _, _, fb_offset, fb_size, _, _ = HEADER.unpack_from(head, HEADER_OFFSET)
        flatbuffer = read_exact(f, source, 0, fb_offset + fb_size, "FlatTensor flatbuffer")
    layouts: dict[str, TensorLayout | None] = {}
    for named in FlatbufferView(flatbuffer, source).root("FlatTensor").tables(2, "named_data"):
        key = named.string(0, "key")
        if key is None:  # read_ptd refused such a file; this one changed since
            raise FormatError(f"{source}: {named.path} has no key")
        table = named.table(2, "tensor_layout")
        if table is None:
            layouts[key] = None
            continue
        code = table.scalar(0, "scalar_type", _I8)
        try:
            scalar_type = ScalarType(code)
        except ValueError:
            raise FormatError(
                f"{source}: {table.path} of key {key!r}: unknown scalar type {code}"
            ) from None
        sizes = tuple(table.scalars(1, "sizes", _I32))
        dim_order = tuple(table.byte_vector(2, "dim_order") or b"")
        layouts[key] = TensorLayout(scalar_type, sizes, dim_order)
    return MappingProxyType(layouts)
