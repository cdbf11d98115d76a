"""The local tier: a :class:`~ptebuild.store.Store` folder behind the tier protocols."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptebuild.errors import CorruptObject
from ptebuild.store import Store
from ptebuild.store.cas import CAS

if TYPE_CHECKING:
    import filelock


class _LocalBlobs:
    def __init__(self, store: Store) -> None:
        self.cas = store.cas

    def has(self, digest: str, size: int | None = None) -> bool:
        return self.cas.has(digest)

    def fetch(self, digest: str, dest: Path, size: int | None = None) -> bool:
        if not self.cas.has(digest):
            return False
        try:
            self.cas.restore(digest, dest)
        except CorruptObject:
            try:
                os.unlink(dest)
            except OSError:
                pass
            raise
        return True

    def put_file(self, path: Path, digest: str | None = None) -> tuple[str, int]:
        if digest is not None and Path(path) == self.cas.path(digest):  # a blob of this store (a worker wrote it)
            try:
                return digest, os.stat(path).st_size
            except OSError:
                raise CorruptObject(f"object {digest} is missing from the cache; build again to store it anew") from None
        stored, size = self.cas.put_file(path)
        if digest is not None and stored != digest:
            self.cas.remove(stored)
            raise CorruptObject(f"{path}: its bytes hash to {stored}, not {digest}; not stored: it changed while stored, build again")
        return stored, size


class _LocalActions:
    def __init__(self, store: Store) -> None:
        self.actions = store.actions

    def get(self, key: str) -> dict[str, Any] | None:
        return self.actions.get(key)

    def put(self, key: str, document: dict[str, Any], refs: list[str]) -> None:
        self.actions.put(key, None, document, refs=refs)


class LocalTier:
    """The cache folder of this machine (``--cache DIR``, ``$PTEBUILD_CACHE``, ``~/.cache/ptebuild``)."""

    source = "local"
    writable = True

    def __init__(self, store: Store) -> None:
        self.store = store
        self.name = f"local cache {store.root}"
        self.blobs = _LocalBlobs(store)
        self.actions = _LocalActions(store)

    # Beyond the protocol: what only a local folder offers.

    @property
    def cas(self) -> CAS:
        return self.store.cas

    def digest_file(self, path: Path) -> tuple[str, int]:
        return self.store.digest_file(path)

    def lock(self, key: str) -> filelock.FileLock:
        return self.store.lock(key)

    def entry_file(self, key: str) -> Path:
        return self.store.actions.path(key)

    def last(self, history_id: str) -> dict[str, Any] | None:
        return self.store.actions.last_for(history_id)

    def set_last(self, history_id: str, key: str) -> None:
        self.store.actions.set_last(history_id, key)

    def count(self, hit: bool) -> None:
        if hit:
            self.store.record_hit()
        else:
            self.store.record_miss()

    def stats(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        self.store.close()
