"""A minimal, bounds-checked reader for FlatBuffers tables, in pure Python.

ptebuild reads ``.pte``, ``.ptd`` and delegate payloads without importing torch or
executorch, so it cannot use the generated readers. It needs only a handful of fields, and
this reader gives every malformed offset a :class:`~ptebuild.errors.FormatError` that says
which field was being read and where, instead of an ``IndexError`` or ``struct.error``.

Wire format (https://flatbuffers.dev/internals/), all little-endian:

- bytes 0..4: ``uoffset`` (u32) from 0 to the root table; bytes 4..8: the file identifier.
- A table at ``pos`` starts with a ``soffset`` (i32): its vtable is at ``pos - soffset``.
- A vtable is ``u16 vtable_size, u16 table_size, u16 field_offset[n]``; field ``i`` is absent
  when ``4 + 2*i >= vtable_size`` or its offset is 0, else it lives at ``pos + offset``.
- Strings, vectors and sub-tables are stored as a u32 offset relative to the field itself.
  A string or vector starts with a u32 length, followed by the bytes or elements; a vector
  of tables holds one u32 relative offset per element.
- A union field ``f`` is two fields: ``f_type`` (u8 tag) at index ``i`` and the table at
  ``i + 1``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from ptebuild.errors import FormatError

U8 = struct.Struct("<B")
U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
I32 = struct.Struct("<i")
U64 = struct.Struct("<Q")

_VTABLE_HEADER_SIZE = 4  # u16 vtable_size + u16 table_size
_VTABLE_ENTRY_SIZE = 2


class FlatbufferView:
    """A flatbuffer held in memory, with the name of the file it came from for messages.

    ``base`` is the file offset of ``buf[0]``: messages report file offsets, which is what
    a reader with a hex dump wants.
    """

    def __init__(self, buf: bytes, source: str, base: int = 0) -> None:
        self.buf = buf
        self.source = source
        self.base = base

    def unpack(self, fmt: struct.Struct, pos: int, what: str) -> int:
        """Reads one integer of ``fmt`` (an integer format) at ``pos``; raises FormatError if it
        is out of range."""
        self._check(fmt, pos, what)
        value: int = fmt.unpack_from(self.buf, pos)[0]
        return value

    def unpack_float(self, fmt: struct.Struct, pos: int, what: str) -> float:
        """:meth:`unpack` for a floating-point format (``<d``)."""
        self._check(fmt, pos, what)
        value: float = fmt.unpack_from(self.buf, pos)[0]
        return value

    def _check(self, fmt: struct.Struct, pos: int, what: str) -> None:
        if pos < 0 or pos + fmt.size > len(self.buf):
            raise FormatError(
                f"{self.source}: truncated or corrupt: cannot read {what} "
                f"({fmt.size} bytes) at offset {self.base + pos}"
            )

    def root(self, type_name: str) -> Table:
        """Returns the root table, named ``type_name`` in messages."""
        return Table(self, self.unpack(U32, 0, f"{type_name} root offset"), type_name)


@dataclass(frozen=True)
class Table:
    """One flatbuffer table. ``path`` (e.g. ``Program.execution_plan[0]``) names it in messages."""

    view: FlatbufferView
    pos: int
    path: str

    def _field_pos(self, index: int, name: str) -> int | None:
        vtable_pos = self.pos - self.view.unpack(I32, self.pos, f"{self.path} vtable offset")
        vtable_size = self.view.unpack(U16, vtable_pos, f"{self.path} vtable size")
        entry = _VTABLE_HEADER_SIZE + _VTABLE_ENTRY_SIZE * index
        if entry + _VTABLE_ENTRY_SIZE > vtable_size:
            return None
        offset = self.view.unpack(U16, vtable_pos + entry, f"{self.path}.{name} vtable entry")
        return None if offset == 0 else self.pos + offset

    def _target(self, index: int, name: str) -> int | None:
        pos = self._field_pos(index, name)
        if pos is None:
            return None
        return pos + self.view.unpack(U32, pos, f"{self.path}.{name} offset")

    def scalar(self, index: int, name: str, fmt: struct.Struct, default: int = 0) -> int:
        """Reads integer scalar field ``index`` (``default`` when absent)."""
        pos = self._field_pos(index, name)
        return default if pos is None else self.view.unpack(fmt, pos, f"{self.path}.{name}")

    def float_scalar(self, index: int, name: str, fmt: struct.Struct, default: float = 0) -> float:
        """Reads floating-point scalar field ``index`` (``default`` when absent)."""
        pos = self._field_pos(index, name)
        return default if pos is None else self.view.unpack_float(fmt, pos, f"{self.path}.{name}")

    def string(self, index: int, name: str) -> str | None:
        """Reads string field ``index`` as UTF-8, or None when absent."""
        start, count = self._vector(index, name, 1)
        if start is None:
            return None
        # Strings end with a NUL past their length; a missing one means a cut or bad offset.
        if self.view.unpack(U8, start + count, f"{self.path}.{name} terminator") != 0:
            raise FormatError(
                f"{self.view.source}: corrupt: {self.path}.{name} at offset "
                f"{self.view.base + start} is not NUL-terminated"
            )
        raw = bytes(self.view.buf[start : start + count])
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError(f"{self.view.source}: {self.path}.{name} is not UTF-8") from None

    def byte_vector(self, index: int, name: str) -> bytes | None:
        """Reads a ``[ubyte]`` or string field as bytes, or None when absent."""
        start, count = self._vector(index, name, 1)
        if start is None:
            return None
        return bytes(self.view.buf[start : start + count])

    def byte_vector_range(self, index: int, name: str) -> tuple[int, int] | None:
        """``(offset, length)`` of a ``[ubyte]`` field's bytes (offset in the file, as messages
        give them), or None when absent: for a large vector a caller streams from the file."""
        start, count = self._vector(index, name, 1)
        return None if start is None else (self.view.base + start, count)

    def scalars(self, index: int, name: str, fmt: struct.Struct) -> list[Any]:
        """Reads a vector-of-scalars field (``[int]``, ``[long]``, ``[double]``...), empty when absent."""
        start, count = self._vector(index, name, fmt.size)
        if start is None:
            return []
        return [value for (value,) in fmt.iter_unpack(self.view.buf[start : start + count * fmt.size])]

    def table(self, index: int, name: str) -> Table | None:
        """Reads sub-table field ``index``, or None when absent."""
        target = self._target(index, name)
        return None if target is None else Table(self.view, target, f"{self.path}.{name}")

    def tables(self, index: int, name: str) -> list[Table]:
        """Reads a vector-of-tables field (empty when absent)."""
        start, count = self._vector(index, name, U32.size)
        if start is None:
            return []
        result = []
        for i in range(count):
            element = start + i * U32.size
            offset = self.view.unpack(U32, element, f"{self.path}.{name}[{i}] offset")
            result.append(Table(self.view, element + offset, f"{self.path}.{name}[{i}]"))
        return result

    def _vector(self, index: int, name: str, element_size: int) -> tuple[int | None, int]:
        target = self._target(index, name)
        if target is None:
            return None, 0
        count = self.view.unpack(U32, target, f"{self.path}.{name} length")
        start = target + U32.size
        # Checked up front so a corrupt length cannot make us loop over billions of elements.
        if start + count * element_size > len(self.view.buf):
            raise FormatError(
                f"{self.view.source}: truncated or corrupt: {self.path}.{name} claims {count} "
                f"elements at offset {self.view.base + start}, past the end of the data"
            )
        return start, count
