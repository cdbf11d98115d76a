"""Exact reads of byte ranges from a file, where a short read is a FormatError.

``.pte`` and ``.ptd`` files can be gigabytes; the readers only ever pull in the headers,
the flatbuffer and (for ``verify_bytes``) one blob at a time.
"""

from __future__ import annotations

import os
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
