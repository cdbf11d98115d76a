"""Persistent stat cache: (path, size, mtime_ns, inode, ctime_ns) -> SHA-256, like git's index.

An unchanged file (same absolute path, size, mtime, inode and ctime as when it was hashed) costs
one ``stat`` and one sqlite lookup instead of a read. The cache lives in ``<store>/state.db``
(sqlite3, WAL journal, busy timeout), which any number of processes may share.

Racy files (git's "racy clean" problem): a file rewritten within the timestamp granularity of
the moment it was hashed can keep the same mtime with new bytes. An entry is trusted only if the
file's mtime is more than :data:`RACY_WINDOW_NS` older than the moment hashing began; a younger
entry is rehashed (and re-recorded, which makes it trustworthy once the file has aged).

The cache never fails a build: if the database is locked, read-only or corrupt, lookups miss
and the file is hashed (a corrupt database is deleted and recreated once).

Schema (``PRAGMA user_version`` = :data:`SCHEMA_VERSION`)::

    stat(path TEXT PRIMARY KEY, size, mtime_ns, ino, ctime_ns, digest TEXT, hashed_ns)
    counters(name TEXT PRIMARY KEY, value INTEGER)      -- hits, misses
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from ptebuild import hashing

SCHEMA_VERSION = 1

#: An entry is trusted only if the file's mtime precedes the hashing time by more than this.
#: 2 s covers coarse filesystems (FAT, some network mounts) as well as ext4/xfs/btrfs.
RACY_WINDOW_NS = 2_000_000_000

#: How long a process waits for another one's write lock on the database.
BUSY_TIMEOUT_S = 2.0

#: After the database could not be opened (locked, read-only), how long to do without it.
RETRY_AFTER_S = 10.0

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS stat (path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER,"
    " ino INTEGER, ctime_ns INTEGER, digest TEXT, hashed_ns INTEGER) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
)


def _stat_key(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def _initialise(conn: Any) -> None:
    """WAL journal, the schema of this version. While another process makes a new database, SQLite
    answers the journal-mode change "database is locked" at once, without its busy timeout: that is
    retried until :data:`BUSY_TIMEOUT_S`, so that builders starting together on an empty cache all
    use it (and none drops its counts)."""
    import sqlite3

    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)
    conn.execute("PRAGMA synchronous=NORMAL")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version not in (0, SCHEMA_VERSION):
        conn.execute("DROP TABLE IF EXISTS stat")
        conn.execute("DROP TABLE IF EXISTS counters")
    for sql in _SCHEMA:
        conn.execute(sql)
    if version != SCHEMA_VERSION:
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


class StatCache:
    """The sqlite-backed stat cache of one store; opened lazily, shared between threads."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self._conn: Any = None
        self._pid = -1
        self._broken = False
        self._retry_at = 0.0  # after a locked/read-only database, when to try again
        self._lock = threading.Lock()

    # -- connection ---------------------------------------------------------------------------

    def _connect(self) -> Any:
        """The open connection, or None if the database cannot be used in this process."""
        if self._broken:
            return None
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        if time.monotonic() < self._retry_at:
            return None
        import sqlite3

        for attempt in (1, 2):
            try:
                self.db_path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(
                    self.db_path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                    check_same_thread=False,
                )
                try:
                    _initialise(conn)
                except BaseException:
                    conn.close()
                    raise
            except sqlite3.DatabaseError as exc:
                # "file is not a database" / malformed: start afresh once. A locked or
                # read-only database is left alone and the cache is simply not used.
                corrupt = not isinstance(exc, sqlite3.OperationalError)
                if attempt == 1 and corrupt:
                    for suffix in ("", "-wal", "-shm"):
                        try:
                            os.unlink(f"{self.db_path}{suffix}")
                        except OSError:
                            pass
                    continue
                if corrupt:
                    self._broken = True
                else:  # locked or read-only: hash without the cache for a while, then retry
                    self._retry_at = time.monotonic() + RETRY_AFTER_S
                return None
            except OSError:
                self._broken = True
                return None
            self._conn, self._pid = conn, os.getpid()
            return conn
        return None  # pragma: no cover - the loop always returns

    def _execute(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]] | None:
        """Run one statement; None if the database is unusable (the caller then falls back)."""
        import sqlite3

        with self._lock:
            conn = self._connect()
            if conn is None:
                return None
            try:
                rows: list[tuple[Any, ...]] = conn.execute(sql, params).fetchall()  # the default row factory: tuples
                return rows
            except sqlite3.Error:
                return None

    def close(self) -> None:
        """Close the connection (it is reopened on next use)."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    # -- digests ------------------------------------------------------------------------------

    def lookup(self, path: str, st: os.stat_result) -> str | None:
        """The cached digest of ``path`` if its stat still matches and the entry is not racy."""
        rows = self._execute(
            "SELECT size, mtime_ns, ino, ctime_ns, digest, hashed_ns FROM stat WHERE path=?",
            (path,),
        )
        if not rows:
            return None
        size, mtime_ns, ino, ctime_ns, digest, hashed_ns = rows[0]
        if (size, mtime_ns, ino, ctime_ns) != _stat_key(st):
            return None
        if hashed_ns - mtime_ns <= RACY_WINDOW_NS:
            return None
        if not hashing.is_digest(digest):
            return None
        return digest

    def record(self, path: str, st: os.stat_result, digest: str, hashed_ns: int) -> None:
        """Remember that ``path`` with stat ``st`` hashed to ``digest`` (hashing began at ``hashed_ns``)."""
        self._execute(
            "INSERT OR REPLACE INTO stat (path, size, mtime_ns, ino, ctime_ns, digest, hashed_ns)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (path, *_stat_key(st), digest, hashed_ns),
        )

    def digest_file(self, path: str | os.PathLike[str]) -> tuple[str, int]:
        """``(sha256 hex, size)`` of a file, read only if the stat cache cannot vouch for it.

        Raises OSError if the file cannot be stat'ed or read.
        """
        apath = os.path.abspath(path)
        st = os.stat(apath)
        cached = self.lookup(apath, st)
        if cached is not None:
            return cached, st.st_size
        hashed_ns = time.time_ns()
        digest, size = hashing.hash_file(apath)
        after = os.stat(apath)
        # Only record what we are sure of: the file did not change while we read it.
        if _stat_key(after) == _stat_key(st) and size == st.st_size:
            self.record(apath, st, digest, hashed_ns)
        return digest, size

    # -- counters -----------------------------------------------------------------------------

    def bump(self, name: str, n: int = 1) -> None:
        """Add ``n`` to a persisted counter (silently skipped if the database is unusable)."""
        self._execute(
            "INSERT INTO counters (name, value) VALUES (?, ?)"
            " ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
            (name, n),
        )

    def counters(self) -> dict[str, int]:
        """All persisted counters (empty if the database is unusable)."""
        rows = self._execute("SELECT name, value FROM counters") or []
        return {name: int(value) for name, value in rows}
