"""The cache front end: the one object the builder talks to.

Verbs: :meth:`Cache.lookup` (is there a result for this key whose recorded dependencies still
hold?), :meth:`Cache.restore` (put a hit's files here, verified), :meth:`Cache.save` (store a
new result: blobs first, then the action entry, in every writable tier), :meth:`Cache.try_lock`
(one lowering of a key across processes sharing the local cache), and the ``--explain`` history.

Behind it are tiers (:mod:`ptebuild.store.tiers`): the local folder first, then a remote server.
A remote hit is verified blob by blob (every SHA-256 checked while it streams) and copied into
the local tier before it is used, so the next build on that machine is local; a wrong or
truncated blob makes the lookup a miss, reported once, and nothing of it is kept. A tier that
raises :class:`~ptebuild.errors.StoreError` is switched off for the rest of the build, alone:
a broken remote leaves the local cache working, and a read-only local cache leaves the remote.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ptebuild.errors import REPORT, CorruptObject, StoreError
from ptebuild.results import ActionResult, Source
from ptebuild.store.cas import CAS
from ptebuild.store.tiers import LocalStore, Tier, Warn

DependencyCheck = Callable[[ActionResult], list[str]]
"""(result) -> what differs between the result's recorded dependencies and this machine now."""


@dataclass
class Hit:
    result: ActionResult
    source: Source
    blobs: dict[str, Path] = field(default_factory=dict)
    """Verified blobs in a temporary folder, when no local tier could take them."""


@dataclass
class Lookup:
    hit: Hit | None
    stale: list[str] = field(default_factory=list)
    """Why an existing entry was not used (its dependencies changed), for --explain."""


class Lock(Protocol):
    """A held lock of :meth:`Cache.try_lock`."""

    def release(self) -> None: ...


class _NoLock:
    def release(self) -> None:
        pass


class Cache:
    def __init__(self, tiers: list[Tier], warn: Warn, *, local_root: Path | None = None) -> None:
        self.tiers = list(tiers)
        self._all = list(tiers)
        self._temps: list[Path] = []
        self.warn = warn
        self.local: LocalStore | None = next(
            (t for t in self.tiers if t.source == "local" and isinstance(t, LocalStore)), None
        )
        self.local_root = local_root
        self._digests: dict[str, tuple[tuple[int, int, int, int], tuple[str, int]]] = {}
        self._temp: Path | None = None
        self._reported: set[str] = set()

    @classmethod
    def for_folder(cls, root: str | os.PathLike[str], warn: Warn | None = None) -> Cache:
        """A front end over one local cache folder (a tier that fails raises: nothing to fall back on)."""
        from ptebuild.store import Store
        from ptebuild.store.local import LocalTier

        def refuse(text: str) -> None:
            raise StoreError(text)

        store = Store(root)
        return cls([LocalTier(store)], warn or refuse, local_root=store.root)

    def __repr__(self) -> str:
        return f"Cache({[t.name for t in self.tiers]})"

    @property
    def enabled(self) -> bool:
        return bool(self.tiers)

    def _failed(self, tier: Tier, exc: StoreError) -> None:
        """Switch ``tier`` off for the rest of the build, with one warning."""
        if tier in self.tiers:
            self.tiers.remove(tier)
            self.warn(f"{tier.name} disabled for this build: {exc}")
        if tier is self.local:
            self.local = None

    def local_failed(self, exc: StoreError) -> None:
        """The local tier's folder could not be written (by a worker, outside the front end):
        switch it off for the rest of the build, with one warning."""
        if self.local is not None:
            self._failed(self.local, exc)

    def _remotes(self) -> list[Tier]:
        return [t for t in self.tiers if t is not self.local]

    # -- files ----------------------------------------------------------------------------------

    def digest_file(self, path: Path) -> tuple[str, int]:
        """``(sha256, size)`` of a file: the local stat cache, memoised for this build."""
        st = os.stat(path)
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        known = self._digests.get(str(path))
        if known is not None and known[0] == stamp:
            return known[1]
        result = None
        if self.local is not None:
            try:
                result = self.local.digest_file(path)
            except StoreError as exc:
                self._failed(self.local, exc)
        if result is None:
            from ptebuild.hashing import hash_file

            result = hash_file(path)
        self._digests[str(path)] = (stamp, result)
        return result

    def output_store(self) -> CAS | None:
        """The local tier's blob store, if it can be written: where this machine's workers put
        the outputs of a build, so that saving a result there writes its entry alone. None
        without a local tier, or with one that cannot be written (a read-only cache)."""
        if self.local is None or not self.local.writable:
            return None
        cas = self.local.cas
        try:
            cas.writer().abort()  # a temporary file made and removed: can this process write there?
        except StoreError:
            return None  # saving there fails too, and switches the tier off then (its hits still count)
        return cas

    # -- lookup, restore, save ------------------------------------------------------------------

    def lookup(self, key: str, check: DependencyCheck | None = None, alias: bool = False, *,
               local_only: bool = False, fetch: bool = True,
               wanted: Callable[[ActionResult], Iterable[str]] | None = None) -> Lookup:
        """The first tier's result for ``key`` whose dependencies still hold, blobs verified.

        ``alias``: ``key`` is an alias (:meth:`save`'s ``aliases``), whose result has a key of its own.
        ``local_only``: ask the local tier only (the executor's nodes ask the remote themselves).
        ``fetch=False``: a remote hit's blobs are only checked to be there, not fetched (a node
        that finds a result for a driver, which fetches them with :meth:`pull`).
        ``wanted(result)``: the outputs of a remote hit to download now (default: all); the
        others are only checked to be on the server, and fetched if :meth:`restore` ever needs
        them (a program of a shared-weights group needs its ``.pte``, not its own ``.ptd``).
        """
        stale: list[str] = []
        tiers: list[Tier] = list(self.tiers)
        if local_only:
            tiers = [self.local] if self.local is not None else []
        for tier in tiers:
            try:
                document = tier.actions.get(key)
            except StoreError as exc:
                self._failed(tier, exc)
                continue
            if document is None:
                continue
            try:
                result = ActionResult.from_json(document)
            except (KeyError, TypeError, ValueError):
                continue  # an entry of another version or shape: a miss
            if result.key != key and not alias:
                continue
            changes = check(result) if check is not None else []
            if changes:
                stale = changes
                continue
            if tier is self.local:
                return Lookup(Hit(result, Source.LOCAL))
            names = None if wanted is None else set(wanted(result))
            hit = self._pull(tier, result, key, names) if fetch else self._present(tier, result)
            if hit is not None:
                return Lookup(hit)
        return Lookup(None, stale)

    def pull(self, result: ActionResult) -> Hit | None:
        """Fetch a result the remote tier holds (found there by another machine, the node of an
        executor) as a lookup's hit would be: every blob verified, then kept locally. None when
        no remote tier is on, or its blobs are not all there whole (reported once)."""
        for tier in self._remotes():
            return self._pull(tier, result, result.key)
        return None

    def _present(self, tier: Tier, result: ActionResult) -> Hit | None:
        """A remote hit whose blobs are all on the server (not fetched), or None."""
        try:
            for o in result.outputs:
                if not tier.blobs.has(o.sha256, o.size):
                    return None
        except StoreError as exc:
            self._failed(tier, exc)
            return None
        return Hit(result, Source.REMOTE)

    def _pull(self, tier: Tier, result: ActionResult, key: str, names: set[str] | None = None) -> Hit | None:
        """Fetch and verify the blobs of a remote result's outputs ``names`` (None: all) that the
        local tier lacks, check that the others are on the server; keep them locally (the local
        entry names the blobs it holds). None: a miss."""
        temp = Path(tempfile.mkdtemp(prefix="fetch-", dir=self._temp_root()))
        self._temps.append(temp)
        outputs = {o.sha256: o for o in result.outputs}
        local = set(self._local_digests(result))
        fetched = {o.sha256: o for o in result.outputs if (names is None or o.name in names) and o.sha256 not in local}
        wanted = [(o.sha256, temp / o.sha256, o.size) for o in fetched.values()]
        failing = tier
        try:
            for digest, output in outputs.items():
                if digest not in fetched and digest not in local and not tier.blobs.has(digest, output.size):
                    shutil.rmtree(temp, ignore_errors=True)
                    return None  # a blob the entry names is gone from the server: a miss, not a broken hit
            fetch_many = getattr(tier.blobs, "fetch_many", None)
            if fetch_many is not None:
                found = fetch_many(wanted)
            else:
                found = [tier.blobs.fetch(digest, dest, size) for digest, dest, size in wanted]
            if not all(found):
                shutil.rmtree(temp, ignore_errors=True)
                return None
            if self.local is not None and self.local.writable:
                failing = self.local
                for digest, path, _ in wanted:
                    self.local.blobs.put_file(path, digest)
                held = self._local_digests(result)
                for name in {result.key, key}:
                    self.local.actions.put(name, result.to_json(), held)
                shutil.rmtree(temp, ignore_errors=True)
                return Hit(result, Source.REMOTE)
        except CorruptObject as exc:
            self._report_once(f"{tier.name}: {exc}; building instead")
            shutil.rmtree(temp, ignore_errors=True)
            return None
        except StoreError as exc:
            self._failed(failing, exc)
            if failing is tier:
                shutil.rmtree(temp, ignore_errors=True)
                return None
        # No local tier to keep them: the verified blobs stay in the temporary folder for restore().
        return Hit(result, Source.REMOTE, blobs={digest: path for digest, path, _ in wanted})

    def restore(self, hit: Hit, into: dict[str, Path]) -> None:
        """Write each output named in ``into`` (file name -> new path), verified.

        Raises CorruptObject (the blob is gone from the cache: build instead) or StoreError.
        """
        for name, dest in into.items():
            output = hit.result.output(name)
            if output is None:
                raise CorruptObject(f"the cached result of {hit.result.target} has no {name}; build again "
                                    "(`ptebuild cache verify` removes broken entries)")
            if output.sha256 in hit.blobs:
                from ptebuild.hashing import hash_file

                shutil.copyfile(hit.blobs[output.sha256], dest)
                if hash_file(dest)[0] != output.sha256:
                    raise CorruptObject(f"{name}: the fetched copy changed on disk; build again")
                continue
            if self.local is None and not self._remotes():
                raise StoreError(f"the local cache is disabled; {REPORT}")
            if self.local is not None:
                try:
                    if self.local.blobs.fetch(output.sha256, dest):
                        continue
                except CorruptObject:
                    raise
                except StoreError as exc:
                    self._failed(self.local, exc)
                    if not self._remotes():
                        raise
            # Not fetched when it was found (a lookup that wanted other outputs): from a remote now.
            if not self._fetch_remote(output.sha256, dest, output.size):
                raise CorruptObject(f"object {output.sha256} ({name}) is missing from the cache; build again to store it anew")

    def _local_digests(self, result: ActionResult) -> list[str]:
        """The blobs of ``result`` the local tier holds (what a local entry for it may name)."""
        if self.local is None:
            return []
        try:
            return sorted(d for d in {o.sha256 for o in result.outputs} if self.local.blobs.has(d))
        except StoreError:
            return []

    def _fetch_remote(self, digest: str, dest: Path, size: int) -> bool:
        """A blob the local tier lacks, from a remote tier, verified, and kept locally; False if
        no remote tier has it whole."""
        for tier in self._remotes():
            try:
                if not tier.blobs.fetch(digest, dest, size):
                    continue
            except CorruptObject as exc:
                self._report_once(f"{tier.name}: {exc}")
                continue
            except StoreError as exc:
                self._failed(tier, exc)
                continue
            if self.local is not None and self.local.writable:
                try:
                    self.local.blobs.put_file(dest, digest)
                except (CorruptObject, StoreError) as exc:
                    self._report_once(f"{self.local.name}: {exc}")
            return True
        return False

    def restore_result(self, result: ActionResult, into: dict[str, Path]) -> None:
        """:meth:`restore` for a result this build already holds (found or saved earlier): its
        blobs are in the local tier. Raises CorruptObject or StoreError as :meth:`restore` does."""
        self.restore(Hit(result, Source.LOCAL), into)

    def missing_blobs(self, digests: list[str], sizes: dict[str, int] | None = None) -> list[str]:
        """The digests no tier has (asked in order: local first), in the order given. ``sizes``
        (digest -> bytes): a REAPI server names blobs by digest and size."""
        missing = list(dict.fromkeys(digests))
        sizes = sizes or {}
        for tier in list(self.tiers):
            if not missing:
                break
            try:
                missing = [d for d in missing if not tier.blobs.has(d, sizes.get(d))]
            except StoreError as exc:
                self._failed(tier, exc)
        return missing

    def fetch_blob(self, digest: str, dest: Path, size: int | None = None) -> None:
        """Write one blob (of ``size`` bytes, which a REAPI server needs) to ``dest`` from the
        first tier that has it, its SHA-256 checked.

        Raises CorruptObject when a tier's copy is wrong (nothing is left at ``dest``) or no tier
        has it, StoreError when no tier can be asked.
        """
        asked = False
        for tier in list(self.tiers):
            try:
                asked = True
                if tier.blobs.fetch(digest, dest, size):
                    return
            except CorruptObject:
                raise
            except StoreError as exc:
                self._failed(tier, exc)
        if not asked:
            raise StoreError("no cache tier is available; give a cache (--cache DIR or --remote-cache URL)")
        raise CorruptObject(f"object {digest} is missing from the cache; build again to store it anew")

    def save(self, result: ActionResult, files: dict[str, Path], aliases: tuple[str, ...] = ()) -> None:
        """Store ``files`` and then ``result`` in every writable tier (blobs before the entry),
        under its key and each of ``aliases`` (other keys that find it)."""
        for tier in [t for t in self.tiers if t.writable]:
            try:
                put_many = getattr(tier.blobs, "put_many", None)
                pairs = [(files[o.name], o.sha256) for o in result.outputs]
                if put_many is not None:
                    put_many(pairs)
                else:
                    for path, digest in pairs:
                        tier.blobs.put_file(path, digest)
                for key in (result.key, *aliases):
                    tier.actions.put(key, result.to_json(), result.digests)
            except CorruptObject as exc:
                self.warn(f"{tier.name}: {exc}")
            except StoreError as exc:
                self._failed(tier, exc)

    def count(self, hit: bool) -> None:
        if self.local is not None:
            self.local.count(hit)

    # -- locks, history, small local documents -------------------------------------------------

    def try_lock(self, key: str) -> Lock | None:
        """The key's lock if this process got it, None if another process holds it."""
        if self.local is None:
            return _NoLock()
        import filelock

        try:
            lock = self.local.lock(key)
            lock.acquire(timeout=0)
            return lock
        except filelock.Timeout:
            return None
        except StoreError as exc:
            self._failed(self.local, exc)
            return _NoLock()

    def last(self, history_id: str) -> ActionResult | None:
        """The result last built or restored for ``history_id`` (a manifest's program), or None."""
        if self.local is None:
            return None
        try:
            document = self.local.last(history_id)
            return ActionResult.from_json(document) if document else None
        except (StoreError, KeyError, TypeError, ValueError):
            return None

    def remember(self, history_id: str, key: str) -> None:
        if self.local is not None:
            try:
                self.local.set_last(history_id, key)
            except StoreError:
                pass

    def memo_get(self, key: str) -> dict[str, Any] | None:
        """A small document only this machine needs (a resolved manifest), or None."""
        if self.local is None:
            return None
        try:
            return self.local.actions.get(key)
        except StoreError:
            return None

    def memo_put(self, key: str, document: dict[str, Any]) -> None:
        if self.local is not None:
            try:
                self.local.actions.put(key, document, [])
            except StoreError:
                pass

    def entry_files(self, keys: list[str]) -> list[Path]:
        """The local files of these action entries (their stat stands for them in a no-op stamp)."""
        if self.local is None:
            return []
        return [self.local.entry_file(key) for key in keys]

    # -- the end of a build ---------------------------------------------------------------------

    def stats(self) -> dict[str, dict[str, Any]]:
        """Each tier's counters for this build (switched-off tiers too), by tier name."""
        return {t.name: {"source": t.source, **t.stats()} for t in self._all}

    def _report_once(self, text: str) -> None:
        if text not in self._reported:
            self._reported.add(text)
            self.warn(text)

    def _temp_root(self) -> str | None:
        if self.local_root is not None:
            try:
                folder = self.local_root / "tmp"
                folder.mkdir(parents=True, exist_ok=True)
                return str(folder)
            except OSError:
                return None
        return None

    def close(self) -> None:
        """Persist this build's tier counters (``ptebuild cache stats``), close every tier."""
        if self.local_root is not None and any(t.source != "local" for t in self._all):
            import json

            from ptebuild.store import _fs

            try:
                data = json.dumps({"tiers": self.stats()}, sort_keys=True, indent=1).encode()
                _fs.atomic_write_bytes(self.local_root / "last-build.json", data)
            except StoreError:
                pass
        for tier in self._all:
            try:
                tier.close()
            except Exception:  # closing must never turn a good build into a failed one
                pass
        for temp in self._temps:
            shutil.rmtree(temp, ignore_errors=True)
