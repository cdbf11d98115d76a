"""Inter-process locks: ``locks/<key>.lock``, one per action key (filelock, fcntl-based on POSIX).

The builder holds ``store.lock(key)`` while it lowers an action, so that among many processes
sharing a cache one does the work while the others wait and then find its record. The OS drops
an fcntl lock when its process dies (even by kill -9), so a lock is never left stale; the empty
lock files themselves are harmless and may be deleted by hand at any time no process runs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from ptebuild.errors import REPORT, StoreError
from ptebuild.store import _fs

if TYPE_CHECKING:
    import filelock

_LOCK_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


def lock_path(root: Path, key: str) -> Path:
    """Where the lock file of ``key`` lives; raise StoreError for a name unfit for a file."""
    if not isinstance(key, str) or not _LOCK_NAME_RE.fullmatch(key):
        raise StoreError(f"not a valid lock name (letters, digits, '_.-'; up to 128): {key!r}; {REPORT}")
    return root / f"{key}.lock"


def file_lock(root: Path, key: str, timeout: float = -1) -> filelock.FileLock:
    """A :class:`filelock.FileLock` on ``<root>/<key>.lock`` (not yet acquired; use ``with``).

    ``timeout`` < 0 waits forever. Raises StoreError if the lock folder cannot be created.
    """
    import filelock  # imported here: it costs ~40 ms and a no-op build may never lock

    path = lock_path(root, key)
    _fs.ensure_dir(root)
    return filelock.FileLock(path, timeout=timeout)
