"""Atomic file writes: a temporary file in the same folder, fsync, then ``os.replace``.

Readers, and a process killed at any moment, see the old file or the whole new one; the
temporary file never stays behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


@contextlib.contextmanager
def atomic_output(path: Path, *, mode: int = 0o644, readable: bool = False) -> Iterator[BinaryIO]:
    """A file to write ``path``'s new bytes into; renamed into place when the block ends without
    an exception (after fsync), removed otherwise. ``readable``: opened ``w+b`` (to hash it back).

    Raises OSError (the temporary file cannot be made, written or renamed).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w+b" if readable else "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_atomically(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` atomically. Raises OSError."""
    with atomic_output(path, mode=mode) as out:
        out.write(data)
