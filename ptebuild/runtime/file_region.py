"""Exact reads of byte ranges from a file, where a short read is a FormatError.

``.pte`` and ``.ptd`` files can be gigabytes; the readers only ever pull in the headers,
the flatbuffer and (for ``verify_bytes``) one blob at a time.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import BinaryIO

from ptebuild.errors import FormatError
from ptebuild.hashing import ShortRead, hash_chunks, read_range


def file_size(f: BinaryIO) -> int:
    return os.fstat(f.fileno()).st_size


def read_exact(f: BinaryIO, source: str, offset: int, size: int, what: str) -> bytes:
    """Returns ``size`` bytes at ``offset``; raises FormatError naming ``what`` if the file is short."""
    # Checked before reading so a corrupt size cannot ask for terabytes.
    data = b""
    if offset + size <= file_size(f):
        f.seek(offset)
        data = f.read(size)
    if len(data) != size:
        raise FormatError(
            f"{source}: truncated: cannot read {what} ({size} bytes) at offset {offset}, "
            f"file has {file_size(f)} bytes"
        )
    return data


def sha256_of_range(f: BinaryIO, source: str, offset: int, size: int, what: str) -> str:
    """Streams ``size`` bytes at ``offset`` through SHA-256 and returns the hex digest."""
    try:
        digest, _ = hash_chunks(read_range(f, offset, size))
    except ShortRead:
        raise FormatError(
            f"{source}: truncated: {what} ({size} bytes at offset {offset}) ends past "
            f"the end of the file"
        ) from None
    return digest


class Blob:
    """A byte string read on request: a delegate's payload or a named-data entry, held in a
    file or in memory. Large payloads (a model's weights) are never read whole by the
    readers that only need their headers and indexes.

    ``read(offset, size, what)`` is relative to the blob's start; a range past its end is a
    :class:`FormatError` naming ``what`` and the blob (``source``).
    """

    def __init__(self, size: int, reader: Callable[[int, int], bytes], source: str) -> None:
        self.size = size
        self._reader = reader
        self.source = source

    @classmethod
    def of_bytes(cls, data: bytes, source: str) -> Blob:
        return cls(len(data), lambda offset, size: data[offset : offset + size], source)

    @classmethod
    def in_file(cls, f: BinaryIO, file_source: str, offset: int, size: int, source: str) -> Blob:
        """``size`` bytes at ``offset`` of the open file ``f`` (named ``file_source``)."""
        return cls(size, lambda start, length: read_exact(f, file_source, offset + start, length, source), source)

    def read(self, offset: int, size: int, what: str) -> bytes:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise FormatError(
                f"{self.source}: truncated or corrupt: {what} [{offset}, {offset + size}) lies outside the "
                f"{self.size}-byte payload"
            )
        return self._reader(offset, size)

    def whole(self, what: str) -> bytes:
        return self.read(0, self.size, what)
