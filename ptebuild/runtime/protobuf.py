"""A minimal, bounds-checked reader for Protocol Buffers messages, in pure Python.

ptebuild reads protobuf messages inside delegate payloads (a model a payload holds) without
importing the library that defines them, whose import may pull in torch. It needs a handful of fields, and this reader gives every malformed byte a
:class:`~ptebuild.errors.FormatError` that names the message path being read and the offset.

Wire format (https://protobuf.dev/programming-guides/encoding/): a message is a sequence of
fields, each a varint tag ``field_number << 3 | wire_type`` followed by its value:

==========  =====================================================================
wire type   value
==========  =====================================================================
0 VARINT    a base-128 varint (at most 10 bytes); ints, enums, bools
1 I64       8 bytes, little-endian (fixed64, sfixed64, double)
2 LEN       a varint length, then that many bytes: strings, bytes, sub-messages,
            packed repeated scalars
5 I32       4 bytes, little-endian (fixed32, sfixed32, float)
==========  =====================================================================

Groups (wire types 3 and 4) are refused: the schemas read have none. A field may repeat; a
non-repeated field seen twice keeps its last value, as protobuf parsers do. A ``map<K, V>``
field is a repeated sub-message with the key as field 1 and the value as field 2. A repeated
scalar may be packed (one LEN field) or not (one field per element); :meth:`Message.ints`
reads both.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptebuild.errors import FormatError

VARINT, I64, LEN, I32 = 0, 1, 2, 5
_MAX_VARINT_BYTES = 10
_FIXED = {I64: 8, I32: 4}


@dataclass(frozen=True)
class Field:
    number: int
    wire_type: int
    value: int | bytes
    """The varint or fixed-width integer, or the bytes of a LEN field."""
    offset: int
    """Where the value starts, relative to the message's source (for messages)."""


class Message:
    """One message: its fields parsed on creation (values of LEN fields are sliced, not parsed).

    ``path`` names it in messages (``Model.description.input[0]``); ``source`` names the file or
    payload; ``base`` is the offset of ``data[0]`` within that source.
    """

    def __init__(self, data: bytes, source: str, path: str, base: int = 0) -> None:
        self.source = source
        self.path = path
        self.base = base
        self.fields = _parse(data, source, path, base)

    def _all(self, number: int) -> list[Field]:
        return [f for f in self.fields if f.number == number]

    def _expect(self, field: Field, wire_type: int, name: str) -> None:
        if field.wire_type != wire_type:
            raise FormatError(
                f"{self.source}: corrupt: {self.path}.{name} at offset {self.base + field.offset} has wire type "
                f"{field.wire_type}, expected {wire_type}"
            )

    def has(self, number: int) -> bool:
        return any(f.number == number for f in self.fields)

    def uint(self, number: int, name: str, default: int = 0) -> int:
        """A varint field (the last one seen), ``default`` when absent."""
        found = self._all(number)
        if not found:
            return default
        self._expect(found[-1], VARINT, name)
        return int(found[-1].value)

    def sint(self, number: int, name: str, default: int = 0) -> int:
        """A signed varint field (``int32``/``int64``: two's complement over 64 bits)."""
        value = self.uint(number, name, default)
        return value - (1 << 64) if value >= 1 << 63 else value

    def ints(self, number: int, name: str) -> list[int]:
        """A repeated varint field, packed or not (signed: ``int64`` elements)."""
        values: list[int] = []
        for field in self._all(number):
            if field.wire_type == VARINT:
                values.append(int(field.value))
            elif field.wire_type == LEN:
                data = field.value
                assert isinstance(data, bytes)
                pos = 0
                while pos < len(data):
                    value, pos = _varint(data, pos, self.source, f"{self.path}.{name}", self.base + field.offset)
                    values.append(value)
            else:
                self._expect(field, VARINT, name)
        return [v - (1 << 64) if v >= 1 << 63 else v for v in values]

    def raw(self, number: int, name: str) -> bytes | None:
        """A LEN field's bytes (the last one seen), None when absent."""
        found = self._all(number)
        if not found:
            return None
        self._expect(found[-1], LEN, name)
        value = found[-1].value
        assert isinstance(value, bytes)
        return value

    def string(self, number: int, name: str, default: str = "") -> str:
        raw = self.raw(number, name)
        if raw is None:
            return default
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError(f"{self.source}: {self.path}.{name} is not UTF-8") from None

    def message(self, number: int, name: str) -> Message | None:
        """A sub-message field (the last one seen), None when absent."""
        found = self._all(number)
        if not found:
            return None
        return self._sub(found[-1], f"{self.path}.{name}")

    def messages(self, number: int, name: str) -> list[Message]:
        """A repeated sub-message field, in order."""
        return [self._sub(f, f"{self.path}.{name}[{i}]") for i, f in enumerate(self._all(number))]

    def map(self, number: int, name: str) -> dict[str, Message]:
        """A ``map<string, Message>`` field: key -> value message."""
        out = {}
        for entry in self.messages(number, name):
            key = entry.string(1, "key")
            value = entry.message(2, "value")
            out[key] = value if value is not None else Message(b"", self.source, f"{self.path}.{name}[{key!r}]")
        return out

    def _sub(self, field: Field, path: str) -> Message:
        self._expect(field, LEN, path.rsplit(".", 1)[-1])
        value = field.value
        assert isinstance(value, bytes)
        return Message(value, self.source, path, self.base + field.offset)


def _varint(data: bytes, pos: int, source: str, what: str, base: int) -> tuple[int, int]:
    value = 0
    for i in range(_MAX_VARINT_BYTES):
        if pos + i >= len(data):
            raise FormatError(f"{source}: truncated: {what}: varint at offset {base + pos} runs past the end")
        byte = data[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value & ((1 << 64) - 1), pos + i + 1
    raise FormatError(f"{source}: corrupt: {what}: varint at offset {base + pos} is longer than {_MAX_VARINT_BYTES} bytes")


def _parse(data: bytes, source: str, path: str, base: int) -> list[Field]:
    fields = []
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos, source, f"{path} field tag", base)
        number, wire_type = tag >> 3, tag & 7
        if number == 0:
            raise FormatError(f"{source}: corrupt: {path}: field number 0 at offset {base + pos}")
        start = pos
        if wire_type == VARINT:
            value, pos = _varint(data, pos, source, f"{path} field {number}", base)
            fields.append(Field(number, wire_type, value, start))
        elif wire_type in _FIXED:
            size = _FIXED[wire_type]
            if pos + size > len(data):
                raise FormatError(f"{source}: truncated: {path} field {number}: {size} bytes at offset {base + pos}")
            fields.append(Field(number, wire_type, int.from_bytes(data[pos : pos + size], "little"), start))
            pos += size
        elif wire_type == LEN:
            length, pos = _varint(data, pos, source, f"{path} field {number} length", base)
            if pos + length > len(data):
                raise FormatError(
                    f"{source}: truncated: {path} field {number} claims {length} bytes at offset {base + pos}, "
                    f"{len(data) - pos} left"
                )
            fields.append(Field(number, wire_type, bytes(data[pos : pos + length]), pos))
            pos += length
        else:
            raise FormatError(f"{source}: corrupt: {path} field {number} at offset {base + start}: wire type {wire_type}")
    return fields
