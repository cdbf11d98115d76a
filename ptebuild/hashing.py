"""Streaming SHA-256: the one home of every loop that hashes bytes as they pass.

Files are read through one reusable buffer per thread (``readv`` + ``memoryview``: no allocation
per chunk); hashlib releases the GIL on large updates, so hashing runs at the speed of the
SHA-256 core (~1.4-1.8 GB/s with SHA-NI). :func:`hash_chunks` hashes any stream of chunks (an
HTTP body, an archive member) and can copy it on the way; :func:`read_range` yields a file's
byte range in chunks and says when the file ends early.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO, TypeGuard

#: Size of the reusable read buffer. 1 MiB keeps syscall overhead under 1 % and stays in L2/L3.
BUF_SIZE = 1 << 20

_local = threading.local()


def buffer() -> memoryview:
    """Return this thread's reusable read buffer (created on first use)."""
    buf = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = memoryview(bytearray(BUF_SIZE))
    return buf


def hash_fd(fd: int) -> tuple[str, int]:
    """Hash an open file descriptor from its current offset to EOF; return ``(sha256 hex, size)``."""
    h = hashlib.sha256()
    buf = buffer()
    size = 0
    while True:
        n = os.readv(fd, [buf])
        if not n:
            break
        h.update(buf[:n])
        size += n
    return h.hexdigest(), size


def hash_file(path: str | os.PathLike[str]) -> tuple[str, int]:
    """Hash a file's bytes with one sequential read; return ``(sha256 hex, size)``.

    Raises OSError if the file cannot be opened or read.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        if hasattr(os, "posix_fadvise"):
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            except OSError:
                pass
        return hash_fd(fd)
    finally:
        os.close(fd)


def hash_bytes(data: bytes | bytearray | memoryview) -> str:
    """SHA-256 hex digest of an in-memory buffer."""
    return hashlib.sha256(data).hexdigest()


def copy_fd(src: int, dst: int) -> tuple[str, int]:
    """Copy ``src`` to ``dst`` (from their current offsets), hashing the bytes as they pass.

    One read of the source, one write of each byte; returns ``(sha256 hex, bytes copied)``.
    Raises OSError from the read or the write.
    """
    h = hashlib.sha256()
    buf = buffer()
    size = 0
    while True:
        n = os.readv(src, [buf])
        if not n:
            break
        chunk = buf[:n]
        h.update(chunk)
        written = 0
        while written < n:
            written += os.write(dst, chunk[written:])
        size += n
    return h.hexdigest(), size


def is_digest(value: object) -> TypeGuard[str]:
    """True if ``value`` is a lowercase hex SHA-256 digest (64 characters)."""
    return (
        isinstance(value, str)
        and len(value) == 64
        and all(c in "0123456789abcdef" for c in value)
    )


def hash_chunks(
    chunks: Iterable[bytes | bytearray | memoryview], sink: Callable[[bytes | bytearray | memoryview], object] | None = None
) -> tuple[str, int]:
    """SHA-256 and size of the bytes of ``chunks``, each also passed to ``sink`` (a file's
    ``write``) when given; ``(sha256 hex, size)``. Exceptions of the iterator or the sink pass."""
    h = hashlib.sha256()
    size = 0
    for chunk in chunks:
        h.update(chunk)
        if sink is not None:
            sink(chunk)
        size += len(chunk)
    return h.hexdigest(), size


class ShortRead(EOFError):
    """A byte range ran past the end of its file (``read_range``); the caller names the file."""


def read_range(f: BinaryIO, offset: int, size: int, chunk: int = BUF_SIZE) -> Iterator[bytes]:
    """The ``size`` bytes of ``f`` at ``offset``, in chunks; raises :class:`ShortRead` if the file
    ends first."""
    f.seek(offset)
    remaining = size
    while remaining:
        data = f.read(min(remaining, chunk))
        if not data:
            raise ShortRead(f"{size} bytes at offset {offset}: the file ends after {size - remaining}")
        remaining -= len(data)
        yield data
