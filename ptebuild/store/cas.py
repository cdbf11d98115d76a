"""Content-addressed blob store: ``objects/<2 hex>/<62 hex>``, named by the SHA-256 of the bytes.

Writing (dvc-objects habit): the bytes stream into a temporary file ``objects/.<random>.tmp``
while they are hashed (one read of the source), the file is fsynced, made read-only (0o444) and
renamed into its shard folder with ``os.replace``; a reader sees a whole blob or none. A put of
a blob already present replaces it with the fresh copy, which also heals a damaged one. Bytes
that are made rather than copied (a lowering's ``.pte`` and ``.ptd``, written by ExecuTorch's
serializer chunk by chunk) stream through a :class:`BlobWriter` (:meth:`CAS.writer`): hashed as
they are written, named when they end, never held whole in memory.

Restoring copies a blob out to a writable file (0o644; never a hardlink to a cache object):
a temporary file in the destination's folder is filled by a reflink (``FICLONE`` ioctl, on
btrfs/xfs/...) or else a streamed copy, the bytes are hashed on the way, then fsync and
``os.replace``. A blob whose bytes do not hash to its name is deleted and reported with
:class:`~ptebuild.errors.CorruptObject`; it is never served.
"""

from __future__ import annotations

import errno
import os
import stat as stat_mod
from collections.abc import Callable, Iterator
from pathlib import Path

from ptebuild import hashing
from ptebuild.errors import REPORT, CorruptObject, StoreError
from ptebuild.store import _fs

#: Linux ``FICLONE`` ioctl request number: clone all extents of one file into another.
FICLONE = 0x40049409

#: Mode of a stored blob: read-only, so no tool can edit the cache through it by accident.
BLOB_MODE = 0o444
#: Mode of a restored file: an ordinary writable output file.
RESTORED_MODE = 0o644

DigestFile = Callable[[Path], "tuple[str, int]"]


def _check_digest(digest: str) -> str:
    if not hashing.is_digest(digest):
        raise StoreError(f"not a SHA-256 hex digest: {digest!r}; {REPORT}")
    return digest


def _try_reflink(src_fd: int, dst_fd: int) -> bool:
    """Clone ``src_fd`` into ``dst_fd`` if the filesystem supports it; False otherwise."""
    try:
        import fcntl

        fcntl.ioctl(dst_fd, FICLONE, src_fd)
    except (OSError, ImportError, OverflowError):
        return False
    return True


class CAS:
    """The blob half of a store, rooted at ``<store>/objects``. Folders are created on first write."""

    def __init__(self, root: Path, digest_file: DigestFile | None = None) -> None:
        self.root = root
        self._digest_file = digest_file or (lambda p: hashing.hash_file(p))

    def path(self, digest: str) -> Path:
        """Where the blob named ``digest`` lives (whether or not it exists)."""
        _check_digest(digest)
        return self.root / digest[:2] / digest[2:]

    def has(self, digest: str) -> bool:
        """True if a blob named ``digest`` is present (its bytes are checked only when restored)."""
        return self.path(digest).is_file()

    def size(self, digest: str) -> int | None:
        """Size in bytes of a stored blob, or None if absent."""
        try:
            return os.stat(self.path(digest)).st_size
        except OSError:
            return None

    def __iter__(self) -> Iterator[tuple[str, Path]]:
        """Every stored blob as ``(digest, path)``; temporary files and strays are skipped."""
        for shard, entry in _fs.sharded_files(self.root):
            digest = shard + entry.name
            if hashing.is_digest(digest):
                yield digest, Path(entry.path)

    # -- writing ------------------------------------------------------------------------------

    def _commit(self, tmp: Path, digest: str) -> None:
        """Move a finished, fsynced temp file into place as blob ``digest``."""
        final = self.path(digest)
        _fs.ensure_dir(final.parent)
        os.chmod(tmp, BLOB_MODE)
        os.replace(tmp, final)

    def put_file(self, path: str | os.PathLike[str]) -> tuple[str, int]:
        """Store a file's bytes, hashing them while they stream (one read); return ``(digest, size)``.

        Raises OSError if the source cannot be read, StoreError if the cache cannot be written.
        """
        src = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            _fs.ensure_dir(self.root)
            tmp: Path | None = None
            try:
                fd, tmp = _fs.open_tmp(self.root, "put-", mode=0o600)
                try:
                    try:
                        digest, size = hashing.copy_fd(src, fd)
                    except OSError as exc:
                        # Tell a failed read of the source from a failed write to the cache.
                        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG):
                            raise
                        raise _SourceError(exc) from exc
                    os.fsync(fd)
                finally:
                    os.close(fd)
                self._commit(tmp, digest)
            except _SourceError as exc:
                _fs.unlink_quietly(tmp)  # type: ignore[arg-type]
                raise exc.error from None
            except OSError as exc:
                if tmp is not None:
                    _fs.unlink_quietly(tmp)
                raise _fs.store_error(exc, "write to the cache", self.root) from None
        finally:
            os.close(src)
        return digest, size

    def writer(self) -> BlobWriter:
        """A new blob, written as a stream (:class:`BlobWriter`). Raises StoreError if the cache
        cannot be written."""
        return BlobWriter(self)

    def put_bytes(self, data: bytes) -> str:
        """Store an in-memory buffer; return its digest. Raises StoreError if the cache cannot be written."""
        digest = hashing.hash_bytes(data)
        _fs.ensure_dir(self.root)
        tmp: Path | None = None
        try:
            fd, tmp = _fs.open_tmp(self.root, "put-", mode=0o600)
            try:
                _fs.write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            self._commit(tmp, digest)
        except OSError as exc:
            if tmp is not None:
                _fs.unlink_quietly(tmp)
            raise _fs.store_error(exc, "write to the cache", self.root) from None
        return digest

    def remove(self, digest: str) -> bool:
        """Delete a blob; True if it was there."""
        return _fs.unlink_quietly(self.path(digest))

    # -- reading ------------------------------------------------------------------------------

    def check(self, digest: str) -> bool:
        """Rehash a stored blob; if its bytes no longer match, delete it and return False.

        A missing blob also returns False.
        """
        try:
            actual, _ = hashing.hash_file(self.path(digest))
        except OSError:
            return False
        if actual != digest:
            self.remove(digest)
            return False
        return True

    def _dest_has(self, digest: str, dest: Path, size: int) -> bool:
        """True if ``dest`` is a regular file whose bytes already hash to ``digest``."""
        try:
            st = os.stat(dest)
        except OSError:
            return False
        if not stat_mod.S_ISREG(st.st_mode) or st.st_size != size:
            return False
        try:
            return self._digest_file(dest)[0] == digest
        except OSError:
            return False

    def restore(self, digest: str, dest: str | os.PathLike[str]) -> bool:
        """Copy blob ``digest`` to ``dest`` (mode 0o644); True if written, False if ``dest`` had it.

        Raises CorruptObject (after deleting the blob) if the blob is missing or its bytes do not
        match its digest: the caller warns and rebuilds. Raises StoreError if ``dest`` cannot be
        written.
        """
        dest = Path(dest)
        src_path = self.path(digest)
        try:
            src = os.open(src_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise CorruptObject(f"object {digest} is missing from the cache; build again to store it anew") from None
        except OSError as exc:
            raise StoreError(f"cannot read object {digest} from the cache: {exc.strerror}; check the cache folder's permissions") from None
        try:
            size = os.fstat(src).st_size
            if self._dest_has(digest, dest, size):
                return False
            folder = dest.parent
            tmp: Path | None = None
            try:
                folder.mkdir(parents=True, exist_ok=True)
                fd, tmp = _fs.open_tmp(folder, dest.name + ".", mode=RESTORED_MODE)
                try:
                    if _try_reflink(src, fd):
                        # The clone shares the blob's extents: hash it to prove them sound.
                        actual, copied = hashing.hash_file(tmp)
                    else:
                        actual, copied = hashing.copy_fd(src, fd)
                    if actual != digest:
                        self.remove(digest)
                        raise CorruptObject(
                            f"object {digest} in the cache is corrupt (its {copied} bytes hash to "
                            f"{actual}); it was removed: build again to store it anew"
                        )
                    os.fchmod(fd, RESTORED_MODE)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, dest)
            except CorruptObject:
                _fs.unlink_quietly(tmp)  # type: ignore[arg-type]
                raise
            except OSError as exc:
                if tmp is not None:
                    _fs.unlink_quietly(tmp)
                raise _fs.store_error(exc, "restore to", dest) from None
        finally:
            os.close(src)
        return True


class BlobWriter:
    """A blob being written: a binary file object whose bytes are hashed as they pass into a
    temporary file in the store's folder; :meth:`commit` fsyncs it, makes it read-only and renames
    it to ``<root>/ab/cdef...`` by its SHA-256, and returns ``(sha256, size)``.

    Use it as a context manager: leaving the block without :meth:`commit` (an exception) removes
    the temporary file, and nothing is stored::

        with cas.writer() as out:
            cord.write_to_file(out)
            digest, size = out.commit()

    Writes are buffered (1 MiB), so that a serializer's many small writes cost few system calls.
    """

    BUFFER = 1 << 20

    def __init__(self, cas: CAS) -> None:
        import hashlib

        self._cas = cas
        _fs.ensure_dir(cas.root)
        try:
            fd, self._tmp = _fs.open_tmp(cas.root, "put-", mode=0o600)
        except OSError as exc:
            raise _fs.store_error(exc, "write to the cache", cas.root) from None
        self._file = open(fd, "wb", buffering=self.BUFFER)  # closed by commit() or abort()
        self._hash = hashlib.sha256()
        self.size = 0
        self.digest: str | None = None
        """Set by :meth:`commit`."""

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` (hashed on the way); return its length. Raises StoreError."""
        self._hash.update(data)
        try:
            self._file.write(data)
        except OSError as exc:
            raise _fs.store_error(exc, "write to the cache", self._cas.root) from None
        n = len(data) if isinstance(data, bytes) else memoryview(data).nbytes
        self.size += n
        return n

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        self._file.flush()

    def commit(self) -> tuple[str, int]:
        """Store what was written as the blob of its SHA-256; return ``(sha256, size)``."""
        if self.digest is not None:
            return self.digest, self.size
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            digest = self._hash.hexdigest()
            self._cas._commit(self._tmp, digest)
        except OSError as exc:
            self.abort()
            raise _fs.store_error(exc, "write to the cache", self._cas.root) from None
        self.digest = digest
        return digest, self.size

    def abort(self) -> None:
        """Drop what was written (nothing is stored)."""
        if not self._file.closed:
            try:
                self._file.close()
            except OSError:
                pass
        if self.digest is None:
            _fs.unlink_quietly(self._tmp)

    def __enter__(self) -> BlobWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.digest is None:
            self.abort()


class _SourceError(Exception):
    """Internal: wraps an OSError from reading a put_file source so it is re-raised as is."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error
