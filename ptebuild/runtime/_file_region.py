"""Exact reads of byte ranges from a file, where a short read is a FormatError.

``.pte`` and ``.ptd`` files can be gigabytes; the readers only ever pull in the headers,
the flatbuffer and (for ``verify_bytes``) one blob at a time.
"""

from __future__ import annotations

import hashlib
import os
from typing import BinaryIO

from ptebuild.errors import FormatError

_HASH_CHUNK = 1 << 20


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
    digest = hashlib.sha256()
    f.seek(offset)
    remaining = size
    while remaining:
        chunk = f.read(min(remaining, _HASH_CHUNK))
        if not chunk:
            raise FormatError(
                f"{source}: truncated: {what} ({size} bytes at offset {offset}) ends past "
                f"the end of the file"
            )
        digest.update(chunk)
        remaining -= len(chunk)
    return digest.hexdigest()
