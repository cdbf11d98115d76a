"""Store upkeep: statistics, garbage collection (size-bounded, LRU) and full verification.

gc and verify hold the store-wide lock ``locks/maintenance.lock`` so two never run at once;
builders do not take it, and both are written so that a build running meanwhile can at worst
miss a record or find a blob gone (a miss or CorruptObject: it rebuilds), never read bad bytes.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ptebuild.store import _fs

if TYPE_CHECKING:
    import filelock

    from ptebuild.store.actions import ActionCache
    from ptebuild.store.cas import CAS


class Store(Protocol):
    """What upkeep needs of a store (:class:`ptebuild.store.Store`, which calls it: typed here,
    not imported, so that the two modules do not import each other)."""

    root: Path
    cas: CAS
    actions: ActionCache

    def lock(self, key: str, timeout: float = -1) -> filelock.FileLock: ...

    def counters(self) -> dict[str, int]: ...

#: Temporary files older than this are leftovers of a killed process; unreferenced blobs younger
#: than this may belong to a build that has not yet written its record, so gc keeps them.
GRACE_SECONDS = 3600.0

MAINTENANCE_LOCK = "maintenance"


@dataclass(frozen=True)
class GcReport:
    """What :func:`gc` did."""

    records_removed: int = 0
    blobs_removed: int = 0
    temps_removed: int = 0
    bytes_freed: int = 0
    bytes_kept: int = 0
    corrupt: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class CacheAudit:
    """What :func:`verify` found in the cache (``ptebuild cache verify``; an output folder's is
    :class:`ptebuild.runtime.verify.VerifyReport`); ``corrupt`` names each dropped item (``object <digest>``,
    ``action <key>: ...``)."""

    blobs_checked: int = 0
    records_checked: int = 0
    blobs_removed: int = 0
    records_removed: int = 0
    bytes_freed: int = 0
    corrupt: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """True if nothing was corrupt."""
        return not self.corrupt


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def stats(store: Store) -> dict[str, Any]:
    """Counts of the store: entries (action records), blobs, bytes (blobs + records), hits, misses."""
    entries = record_bytes = blobs = blob_bytes = 0
    for _, path in store.actions:
        entries += 1
        record_bytes += _size(path)
    for _, path in store.cas:
        blobs += 1
        blob_bytes += _size(path)
    counters = store.counters()
    return {
        "root": str(store.root),
        "entries": entries,
        "blobs": blobs,
        "bytes": blob_bytes + record_bytes,
        "blob_bytes": blob_bytes,
        "hits": counters.get("hits", 0),
        "misses": counters.get("misses", 0),
    }


def clean_temps(store: Store, older_than: float) -> int:
    """Delete the store's temporary files last modified before ``older_than`` (unix time)."""
    removed = 0
    folders = [store.root, store.cas.root, store.actions.last_root, store.actions.root]
    for parent in (store.cas.root, store.actions.root):
        try:
            folders += [Path(e.path) for e in os.scandir(parent) if e.is_dir(follow_symlinks=False)]
        except OSError:
            pass
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if not (entry.name.startswith(".") and entry.name.endswith(_fs.TMP_SUFFIX)):
                continue
            try:
                if entry.stat(follow_symlinks=False).st_mtime < older_than:
                    removed += _fs.unlink_quietly(entry.path)
            except OSError:
                continue
    return removed


def gc(store: Store, max_size: int, *, now: float | None = None,
       grace: float = GRACE_SECONDS) -> GcReport:
    """Shrink the store to at most ``max_size`` bytes (blobs + records) if it can.

    Drops damaged records and records whose blobs are gone, deletes unreferenced blobs older
    than ``grace`` seconds, then evicts records least recently used first, deleting each blob
    that no kept record refers to, until the size fits. Never deletes a blob a kept record
    needs. Removes temporary files older than ``grace``. Raises StoreError if the store cannot
    be written.
    """
    now = time.time() if now is None else now
    with store.lock(MAINTENANCE_LOCK):
        temps = clean_temps(store, now - grace)
        blobs: dict[str, tuple[int, float]] = {}
        for digest, path in store.cas:
            try:
                st = os.stat(path)
            except OSError:
                continue
            blobs[digest] = (st.st_size, st.st_mtime)

        corrupt: list[str] = []
        records: list[tuple[float, str, int, list[str]]] = []
        freed = 0
        records_removed = 0
        for key, path in store.actions:
            size = _size(path)
            body = store.actions.read(key)  # removes a damaged record
            if body is None:
                corrupt.append(f"action {key}")
                records_removed += 1
                freed += size
                continue
            missing = [d for d in body["refs"] if d not in blobs]
            if missing:
                store.actions.remove(key)
                corrupt.append(f"action {key}: needs missing object {missing[0]}")
                records_removed += 1
                freed += size
                continue
            try:
                last_use = os.stat(path).st_mtime
            except OSError:
                continue
            records.append((last_use, key, size, body["refs"]))

        refcount: Counter[str] = Counter()
        for _, _, _, refs in records:
            refcount.update(refs)
        total = sum(size for size, _ in blobs.values()) + sum(r[2] for r in records)
        doomed: set[str] = set()
        for digest, (size, mtime) in blobs.items():
            if refcount[digest] == 0 and mtime < now - grace:
                doomed.add(digest)
                total -= size

        records.sort()
        evicted: list[str] = []
        for _, key, size, refs in records:
            if total <= max_size:
                break
            evicted.append(key)
            total -= size
            for digest in refs:
                refcount[digest] -= 1
                if refcount[digest] == 0:
                    doomed.add(digest)
                    total -= blobs[digest][0]

        # Records first: at no moment does a kept record point at a deleted blob.
        for key in evicted:
            size = _size(store.actions.path(key))
            if store.actions.remove(key):
                records_removed += 1
                freed += size
        blobs_removed = 0
        for digest in sorted(doomed):
            if store.cas.remove(digest):
                blobs_removed += 1
                freed += blobs[digest][0]
        return GcReport(
            records_removed=records_removed,
            blobs_removed=blobs_removed,
            temps_removed=temps,
            bytes_freed=freed,
            bytes_kept=max(total, 0),
            corrupt=tuple(corrupt),
        )


def verify(store: Store) -> CacheAudit:
    """Rehash every blob and check every record; drop and report the corrupt ones.

    Records that need a missing (or just dropped) blob are dropped too. Raises StoreError if
    the store cannot be written.
    """
    with store.lock(MAINTENANCE_LOCK):
        corrupt: list[str] = []
        blobs_checked = blobs_removed = records_checked = records_removed = freed = 0
        for digest, path in store.cas:
            blobs_checked += 1
            size = _size(path)
            if not store.cas.check(digest):
                if not path.exists():
                    blobs_removed += 1
                    freed += size
                corrupt.append(f"object {digest}")
        for key, path in store.actions:
            records_checked += 1
            size = _size(path)
            body = store.actions.read(key)  # removes a damaged record
            if body is None:
                corrupt.append(f"action {key}")
            else:
                missing = [d for d in body["refs"] if not store.cas.has(d)]
                if not missing:
                    continue
                store.actions.remove(key)
                corrupt.append(f"action {key}: needs missing object {missing[0]}")
            records_removed += 1
            freed += size
        return CacheAudit(
            blobs_checked=blobs_checked,
            records_checked=records_checked,
            blobs_removed=blobs_removed,
            records_removed=records_removed,
            bytes_freed=freed,
            corrupt=tuple(corrupt),
        )
