"""Small filesystem helpers shared by the store modules: temp files, atomic replace, error mapping."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

from ptebuild.errors import StoreError

#: Suffix of every temporary file the store creates. Readers never look at these names;
#: :func:`ptebuild.store.maintenance.gc` removes the ones older than an hour.
TMP_SUFFIX = ".tmp"

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

_WRITE_FAULTS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "the folder is on a read-only filesystem",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
}


def store_error(exc: OSError, action: str, path: Path | str) -> StoreError:
    """Turn an OSError met while writing into a one-line :class:`StoreError`."""
    why = _WRITE_FAULTS.get(exc.errno or 0) or exc.strerror or str(exc)
    return StoreError(f"cannot {action} {path}: {why}")


def ensure_dir(path: Path) -> None:
    """Create ``path`` and its parents; raise StoreError if that is impossible."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise store_error(exc, "create the cache folder", path) from None


def tmp_name(folder: Path, stem: str = "") -> Path:
    """A fresh temporary file name in ``folder`` (hidden, random, ``.tmp`` suffix)."""
    return folder / f".{stem}{os.urandom(8).hex()}{TMP_SUFFIX}"


def open_tmp(folder: Path, stem: str = "", mode: int = 0o644) -> tuple[int, Path]:
    """Create and open a new temporary file in ``folder``; return ``(fd, path)``. Raises OSError."""
    path = tmp_name(folder, stem)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, mode)
    return fd, path


def unlink_quietly(path: Path | str) -> bool:
    """Remove a file, ignoring its absence and any error; True if it was removed."""
    try:
        os.unlink(path)
    except OSError:
        return False
    return True


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write every byte of ``data`` to ``fd``."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def atomic_write_bytes(path: Path, data: bytes, *, mode: int = 0o644, what: str = "write") -> None:
    """Write ``data`` to ``path`` atomically (:func:`ptebuild.atomic.write_atomically`).

    Readers see either the old file or the whole new one. Raises StoreError on any OSError.
    """
    from ptebuild.atomic import write_atomically

    try:
        ensure_dir(path.parent)
        write_atomically(path, data, mode=mode)
    except OSError as exc:
        raise store_error(exc, what, path) from None


def sharded_files(root: Path) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """Every regular file in ``root/<2 chars>/`` folders, as ``(shard name, entry)``, sorted."""
    try:
        shards = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return
    for shard in shards:
        if len(shard.name) != 2 or not shard.is_dir(follow_symlinks=False):
            continue
        try:
            entries = sorted(os.scandir(shard.path), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                yield shard.name, entry
