"""The embedded cache store of ptebuild: blobs by SHA-256, action records, a stat cache.

Where: ``--cache DIR``, else ``$PTEBUILD_CACHE``, else ``$XDG_CACHE_HOME/ptebuild``, else
``~/.cache/ptebuild`` (:func:`default_cache_dir`).

On-disk layout, version 1 (every folder is created on first write, so a store can be opened
on a read-only or missing folder; writing there raises :class:`~ptebuild.errors.StoreError`)::

    <root>/
      objects/ab/cdef...        blob named by the SHA-256 of its bytes (64 hex: 2 + 62), mode 0444
      objects/.put-*.tmp        a blob being written (ignored by readers; gc removes old ones)
      actions/ab/<key>.json     action record: "ptebuild-action 1 <sha256>" line + canonical JSON
      last/<program>.key        "<key> <program>": the last record stored for a program
      locks/<key>.lock          filelock (fcntl) lock files; locks/maintenance.lock for gc/verify
      state.db                  sqlite3 (WAL): stat cache (path, size, mtime_ns, inode, ctime_ns
                                -> sha256) and the persisted hit/miss counters

Every file is written to a temporary file in the same folder, fsynced and renamed into place
with ``os.replace``: a reader (or a process killed with SIGKILL at any moment) sees whole entries
or none. Details of each part live in its module: :mod:`.cas`, :mod:`.actions`,
:mod:`.statcache`, :mod:`.locks`, :mod:`.maintenance`, :mod:`ptebuild.sizes`, :mod:`.hashing`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptebuild.cache_dir import default_cache_dir
from ptebuild.sizes import format_size, parse_size
from ptebuild.store.actions import ActionCache
from ptebuild.store.cas import CAS
from ptebuild.store.statcache import StatCache

if TYPE_CHECKING:
    import filelock

    from ptebuild.store.maintenance import CacheAudit, GcReport

__all__ = ["CacheAudit", "GcReport", "Store", "default_cache_dir", "format_size", "parse_size"]


class Store:
    """A cache store rooted at ``root``. Cheap to open: nothing is touched until used."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(os.path.abspath(Path(root).expanduser()))
        self._stat = StatCache(self.root / "state.db")
        self.cas = CAS(self.root / "objects", digest_file=self.digest_file)
        self.actions = ActionCache(self.root / "actions", self.root / "last")

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    def lock(self, key: str, timeout: float = -1) -> filelock.FileLock:
        """A FileLock on ``locks/<key>.lock`` (use as ``with store.lock(key):``).

        Raises StoreError if the lock folder cannot be created (e.g. a read-only cache).
        """
        from ptebuild.store.locks import file_lock

        return file_lock(self.root / "locks", key, timeout)

    def digest_file(self, path: str | os.PathLike[str]) -> tuple[str, int]:
        """``(sha256 hex, size)`` of a file; an unchanged file is not read (stat cache)."""
        return self._stat.digest_file(path)

    def record_hit(self) -> None:
        """Count one action-cache hit (persisted; never fails)."""
        self._stat.bump("hits")

    def record_miss(self) -> None:
        """Count one action-cache miss (persisted; never fails)."""
        self._stat.bump("misses")

    def counters(self) -> dict[str, int]:
        """The persisted counters (``hits``, ``misses``; empty if the database is unusable)."""
        return self._stat.counters()

    def stats(self) -> dict[str, Any]:
        """``{"root", "entries", "blobs", "bytes", "blob_bytes", "hits", "misses"}``."""
        from ptebuild.store import maintenance

        return maintenance.stats(self)

    def gc(self, max_size: int) -> GcReport:
        """Evict least recently used records (and the blobs only they need) down to ``max_size`` bytes."""
        from ptebuild.store import maintenance

        return maintenance.gc(self, max_size)

    def verify(self) -> CacheAudit:
        """Rehash every blob and record; drop and report corrupt ones."""
        from ptebuild.store import maintenance

        return maintenance.verify(self)

    def close(self) -> None:
        """Close the stat-cache database (reopened on next use)."""
        self._stat.close()


def __getattr__(name: str) -> object:  # lazy re-exports keep `import ptebuild.store` light
    if name in ("GcReport", "CacheAudit"):
        from ptebuild.store import maintenance

        return getattr(maintenance, name)
    raise AttributeError(f"module 'ptebuild.store' has no attribute {name!r}")
