"""Reads a ``.pte`` (ExecuTorch program) file: its methods and the named data it needs from outside.

Pure Python; imports neither torch nor executorch, and executes nothing.

Spec: executorch ``exir/_serialize/program.fbs`` (schema, file identifier ``ET12``) and
``exir/_serialize/_program.py`` (``_ExtendedHeader``). Layout, little-endian, offsets from
the start of the file:

====================  ==========================================================
0..4                  u32 offset of the root ``Program`` table
4..8                  file identifier ``ET12``
8..40                 optional extended header: ``eh00``, u32 header length
                      (>= 24), u64 program_size (flatbuffer bytes, header
                      included), u64 segment_base_offset, and when the length
                      is > 24, u64 segment_data_size
..program_size        rest of the flatbuffer (offsets relative to byte 0); with
                      no extended header the whole file is the flatbuffer
segment_base_offset   segment data: ``Program.segments[i]`` is
                      ``[base + offset, base + offset + size)``
====================  ==========================================================

Tables read (field index: name):

- ``Program`` {1: execution_plan, 3: backend_delegate_data, 4: segments, 7: named_data}
- ``ExecutionPlan`` {0: name, 2: values [EValue], 7: delegates [BackendDelegate]}
- ``EValue`` {0: val_type u8 (5 = Tensor), 1: val}; ``Tensor`` {9: extra_tensor_info}
- ``ExtraTensorInfo`` {1: fully_qualified_name, 2: location u8 (1 = EXTERNAL)}
- ``BackendDelegate`` {0: id, 1: processed}; ``BackendDelegateDataReference`` {0: location
  u8 (0 = INLINE in backend_delegate_data, 1 = SEGMENT), 1: index u32};
  ``BackendDelegateInlineData`` {0: data}; ``DataSegment`` {0: offset, 1: size};
  ``NamedData`` {0: key, 1: segment_index}

executorch writes the extended header only when the program has segments (a portable
program whose weights are all external has none). Without it the file's expected length is
unknown, and a cut file is caught when a read runs past its end (strings must end in NUL).

Keys a program needs from a ``.ptd``:

- every EXTERNAL tensor's ``fully_qualified_name`` (the runtime resolves these in the
  external data map only: with no ``.ptd`` it fails with "external_data_map is null");
- every ``named_key`` of an XNNPACK delegate blob (see :mod:`.xnnpack_blob`), minus the
  keys the ``.pte`` carries in its own ``named_data``.

Blobs of other delegates are opaque: their ids are listed in ``opaque_delegates`` so a
caller knows the key list may be incomplete.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import BinaryIO

from ptebuild.errors import FormatError
from ptebuild.runtime._file_region import file_size, read_exact
from ptebuild.runtime._flatbuffer import U8, U32, U64, FlatbufferView, Table
from ptebuild.runtime.xnnpack_blob import BACKEND_ID as XNNPACK_BACKEND_ID
from ptebuild.runtime.xnnpack_blob import HEADER as XNNPACK_HEADER
from ptebuild.runtime.xnnpack_blob import HEADER_MAGIC as XNNPACK_HEADER_MAGIC
from ptebuild.runtime.xnnpack_blob import xnnpack_named_keys

FILE_IDENTIFIER = b"ET12"
EXTENDED_HEADER_MAGIC = b"eh00"
# At byte 8: magic, header length, program size, segment base offset.
EXTENDED_HEADER = struct.Struct("<4sIQQ")
# Follows EXTENDED_HEADER when the header length says it is there.
SEGMENT_DATA_SIZE = struct.Struct("<Q")
EXTENDED_HEADER_OFFSET = 8
_IDENTIFIER_SLICE = slice(4, 8)
_HEAD_SIZE = EXTENDED_HEADER_OFFSET + EXTENDED_HEADER.size + SEGMENT_DATA_SIZE.size


class KernelType(IntEnum):
    """``EValue.val_type`` tags (union ``KernelTypes``) this reader cares about."""

    TENSOR = 5


class TensorDataLocation(IntEnum):
    SEGMENT = 0
    EXTERNAL = 1


class DataLocation(IntEnum):
    INLINE = 0
    SEGMENT = 1


@dataclass(frozen=True)
class PteFile:
    """What a ``.pte`` declares about its methods and named data.

    ``external_tensor_keys``: FQN keys of EXTERNAL (portable) tensors. ``delegate_keys``:
    keys XNNPACK blobs refer to. ``named_data_keys``: keys stored inside the ``.pte``.
    ``opaque_delegates``: ``(method, backend id)`` of delegate blobs this reader cannot list.
    """

    path: Path
    method_names: tuple[str, ...]
    external_tensor_keys: frozenset[str]
    delegate_keys: frozenset[str]
    named_data_keys: frozenset[str]
    opaque_delegates: tuple[tuple[str, str], ...]

    @property
    def required_keys(self) -> frozenset[str]:
        """Keys that must be found in the ``.ptd`` files loaded with this program."""
        return self.external_tensor_keys | (self.delegate_keys - self.named_data_keys)


@dataclass(frozen=True)
class _Layout:
    program_size: int
    segment_base: int
    segment_data_size: int


def read_pte(path: str | Path) -> PteFile:
    """Reads the flatbuffer (and XNNPACK delegate headers) of a ``.pte``.

    Raises:
        FormatError: not an ET12 program, or truncated/corrupt; the message names the file,
            the field and the offset.
        OSError: the file cannot be opened.
    """
    path = Path(path)
    source = str(path)
    with open(path, "rb") as f:
        layout = _read_layout(f, source)
        view = FlatbufferView(
            read_exact(f, source, 0, layout.program_size, "Program flatbuffer"), source
        )
        program = view.root("Program")
        segments = _segments(program, source, layout)
        method_names = []
        external_keys: set[str] = set()
        delegate_keys: set[str] = set()
        opaque: list[tuple[str, str]] = []
        inline_data = program.tables(3, "backend_delegate_data")
        for plan in program.tables(1, "execution_plan"):
            name = plan.string(0, "name") or ""
            method_names.append(name)
            external_keys |= _external_tensor_keys(plan)
            for index, delegate in enumerate(plan.tables(7, "delegates")):
                backend = delegate.string(0, "id") or ""
                if backend != XNNPACK_BACKEND_ID:
                    opaque.append((name, backend))
                    continue
                where = f"{source}: method {name!r} delegate {index} ({backend})"
                blob = _delegate_blob(f, delegate, inline_data, segments, where)
                delegate_keys |= xnnpack_named_keys(blob, where)
        named_data_keys = frozenset(
            key for named in program.tables(7, "named_data") if (key := named.string(0, "key"))
        )
    return PteFile(
        path=path,
        method_names=tuple(method_names),
        external_tensor_keys=frozenset(external_keys),
        delegate_keys=frozenset(delegate_keys),
        named_data_keys=named_data_keys,
        opaque_delegates=tuple(opaque),
    )


def _read_layout(f: BinaryIO, source: str) -> _Layout:
    size = file_size(f)
    head = f.read(_HEAD_SIZE)
    if len(head) < EXTENDED_HEADER_OFFSET:
        raise FormatError(f"{source}: truncated: {len(head)} bytes, too short for a .pte")
    identifier = head[_IDENTIFIER_SLICE]
    if identifier != FILE_IDENTIFIER:
        raise FormatError(
            f"{source}: not a .pte file: identifier {identifier!r} at offset 4, "
            f"expected {FILE_IDENTIFIER!r} (executorch 1.5.1)"
        )
    magic = head[EXTENDED_HEADER_OFFSET : EXTENDED_HEADER_OFFSET + len(EXTENDED_HEADER_MAGIC)]
    if magic != EXTENDED_HEADER_MAGIC:
        return _Layout(program_size=size, segment_base=0, segment_data_size=0)
    try:
        _, length, program_size, segment_base = EXTENDED_HEADER.unpack_from(
            head, EXTENDED_HEADER_OFFSET
        )
        segment_data_size = 0
        if length > EXTENDED_HEADER.size:
            (segment_data_size,) = SEGMENT_DATA_SIZE.unpack_from(
                head, EXTENDED_HEADER_OFFSET + EXTENDED_HEADER.size
            )
    except struct.error:
        raise FormatError(
            f"{source}: truncated: extended header at offset {EXTENDED_HEADER_OFFSET} is "
            f"cut off ({size} bytes in file)"
        ) from None
    if length < EXTENDED_HEADER.size:
        raise FormatError(
            f"{source}: bad extended header at offset {EXTENDED_HEADER_OFFSET}: length {length}"
        )
    if program_size > size or segment_base + segment_data_size > size:
        raise FormatError(
            f"{source}: truncated: header promises {program_size} bytes of program and "
            f"segment data up to offset {segment_base + segment_data_size}, file has {size}"
        )
    return _Layout(program_size, segment_base, segment_data_size)


def _segments(program: Table, source: str, layout: _Layout) -> list[tuple[int, int]]:
    """Returns ``(absolute offset, size)`` of each ``Program.segments`` entry, bounds-checked."""
    segments = []
    for segment in program.tables(4, "segments"):
        offset = segment.scalar(0, "offset", U64)
        size = segment.scalar(1, "size", U64)
        if offset + size > layout.segment_data_size:
            raise FormatError(
                f"{source}: {segment.path} [{offset}, {offset + size}) lies outside the "
                f"{layout.segment_data_size} bytes of segment data"
            )
        segments.append((layout.segment_base + offset, size))
    return segments


def _external_tensor_keys(plan: Table) -> set[str]:
    keys = set()
    for value in plan.tables(2, "values"):
        if value.scalar(0, "val_type", U8) != KernelType.TENSOR:
            continue
        tensor = value.table(1, "val")
        info = tensor.table(9, "extra_tensor_info") if tensor else None
        if info is None:
            continue
        if info.scalar(2, "location", U8) == TensorDataLocation.EXTERNAL:
            fqn = info.string(1, "fully_qualified_name")
            if not fqn:
                raise FormatError(f"{plan.view.source}: {info.path} is EXTERNAL but has no name")
            keys.add(fqn)
    return keys


def _delegate_blob(
    f: BinaryIO,
    delegate: Table,
    inline_data: list[Table],
    segments: list[tuple[int, int]],
    where: str,
) -> bytes:
    """Returns the delegate's blob, or for a segment only its header and flatbuffer."""
    reference = delegate.table(1, "processed")
    if reference is None:
        raise FormatError(f"{where}: {delegate.path} has no processed data")
    location = reference.scalar(0, "location", U8)
    index = reference.scalar(1, "index", U32)
    if location == DataLocation.INLINE:
        if index >= len(inline_data):
            raise FormatError(f"{where}: inline data index {index} out of range")
        return inline_data[index].byte_vector(0, "data") or b""
    if location != DataLocation.SEGMENT or index >= len(segments):
        raise FormatError(f"{where}: bad processed reference (location {location}, index {index})")
    offset, size = segments[index]
    # The constant data after the XNNPACK flatbuffer can be large; read only what names keys.
    head = read_exact(f, where, offset, min(size, 4 + XNNPACK_HEADER.size), "XNNPACK header")
    if head[4:8] == XNNPACK_HEADER_MAGIC and len(head) == 4 + XNNPACK_HEADER.size:
        _, _, fb_offset, fb_size = XNNPACK_HEADER.unpack_from(head, 4)
        size = min(size, fb_offset + fb_size)
    return read_exact(f, where, offset, size, "XNNPACK delegate blob")
