"""The gRPC tier's blobs: the CAS and ByteStream, batched and streamed, every blob verified.

Is it there: ``FindMissingBlobs``, one call for all of an entry's blobs. Small blobs travel in
batches (``BatchReadBlobs`` / ``BatchUpdateBlobs``, several in one request while it stays within
:meth:`~ptebuild.store.grpc_channel.Rpc.batch_limit`), large ones by ByteStream Read / Write in
1 MiB messages, streamed from and to the file. An upload asks FindMissingBlobs first and sends
only what the server lacks (a REAPI server checks the hash of every upload: it holds no damaged
blob to repair). The empty blob is never sent nor asked for: REAPI servers always have it.

Every blob is verified as the HTTP tier verifies it: its SHA-256 computed while it streams into a
temporary file next to its destination, renamed into place only when whole and right; wrong bytes
raise :class:`~ptebuild.errors.CorruptObject` at once, a stream cut on every try raises it too.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path

from ptebuild.errors import CorruptObject, FormatError
from ptebuild.hashing import hash_bytes, hash_file
from ptebuild.store import reapi
from ptebuild.store.faults import Fault
from ptebuild.store.grpc_channel import BLOB_OVERHEAD, Rpc, status_fault
from ptebuild.store.reapi import Digest
from ptebuild.store.remote import Sink, check_digest, download, parallel, part_path, short, unlink
from ptebuild.store.signing import MAX_ENTRY_BYTES

EMPTY = hash_bytes(b"")
"""The empty blob's SHA-256: every REAPI server has it."""


class GrpcBlobStore:
    """The CAS and ByteStream: blobs, streamed and verified. Implements
    :class:`~ptebuild.store.tiers.BlobStore`; a blob is named by its SHA-256 and its size (a size
    not given must have been met in this build: an entry read, a blob stored)."""

    def __init__(self, rpc: Rpc, upload: bool, jobs: int) -> None:
        self._rpc = rpc
        self._upload = upload
        self._jobs = max(1, jobs)
        self._lock = threading.Lock()
        self._sizes: dict[str, int] = {EMPTY: 0}
        self._present: set[str] = {EMPTY}
        """Blobs known to be on the server in this build (uploaded, fetched or found)."""
        self._failed: set[str] = set()
        """Blobs whose upload failed in this build: no entry naming them is uploaded."""

    def __repr__(self) -> str:
        return f"<blobs of {self._rpc.name}>"

    # -- what is known --------------------------------------------------------------------------

    def learn(self, digests: Iterable[Digest]) -> None:
        """Remember the sizes of blobs (those of an entry read from the server)."""
        with self._lock:
            for d in digests:
                self._sizes[d.hash] = d.size

    def _digest(self, digest: str, size: int | None) -> Digest:
        check_digest(digest)
        if size is None:
            with self._lock:
                size = self._sizes.get(digest)
            if size is None:
                raise ValueError(f"the gRPC tier needs the size of blob {digest}")
        return Digest(digest, size)

    def _known(self, d: Digest, present: bool) -> None:
        with self._lock:
            self._sizes[d.hash] = d.size
            if present:
                self._present.add(d.hash)
                self._failed.discard(d.hash)
            else:
                self._present.discard(d.hash)

    def _small(self, d: Digest) -> bool:
        return d.size + BLOB_OVERHEAD <= self._rpc.batch_limit()

    def _batches(self, items: list[tuple[int, Digest]]) -> list[list[tuple[int, Digest]]]:
        """``items`` in groups whose data fits one batch request or answer."""
        limit = self._rpc.batch_limit()
        groups: list[list[tuple[int, Digest]]] = []
        total = limit
        for item in items:
            cost = item[1].size + BLOB_OVERHEAD
            if total + cost > limit:
                groups.append([])
                total = 0
            groups[-1].append(item)
            total += cost
        return groups

    # -- is it there ----------------------------------------------------------------------------

    def _find_missing(self, digests: list[Digest]) -> list[Digest] | None:
        """The digests the server lacks (FindMissingBlobs), or None after a fault (warned)."""
        asked = [d for d in dict.fromkeys(digests) if d.size]
        if not asked:
            return []
        request = reapi.find_missing_blobs_request(self._rpc.instance, asked)
        what = asked[0].hash if len(asked) == 1 else f"{len(asked)} blobs"

        def attempt() -> list[Digest]:
            try:
                return reapi.find_missing_blobs_response(self._rpc.unary(reapi.FIND_MISSING_BLOBS, request) or b"")
            except FormatError:
                raise Fault("malformed FindMissingBlobsResponse", transient=False) from None

        ok, missing = self._rpc.call("FindMissingBlobs", what, attempt)
        if not ok:
            return None
        gone = {d.hash for d in missing}
        for d in asked:
            self._known(d, d.hash not in gone)
        return [d for d in asked if d.hash in gone]

    def has(self, digest: str, size: int | None = None) -> bool:
        """True if the server has the blob (FindMissingBlobs). A fault is a False, after one warning."""
        d = self._digest(digest, size)
        missing = self._find_missing([d])
        return missing is not None and not missing

    def refs_missing(self, refs: Iterable[Digest]) -> list[str]:
        """The refs not known to be on the server (failed uploads; others asked in one call)."""
        ask, out = [], []
        for d in refs:
            with self._lock:
                failed, present = d.hash in self._failed, d.hash in self._present
            if failed:
                out.append(d.hash)
            elif not present:
                ask.append(d)
        if ask:
            missing = self._find_missing(ask)
            out += [d.hash for d in ask] if missing is None else [d.hash for d in missing]
        return out

    # -- reading --------------------------------------------------------------------------------

    def fetch(self, digest: str, dest: Path, size: int | None = None) -> bool:
        """Download the blob into the new file ``dest``, verified while streaming; False if absent.

        Raises CorruptObject on wrong bytes (or a stream cut on every try), StoreError if the tier
        is switched off, OSError if ``dest``'s folder cannot be written.
        """
        return self.fetch_many([(digest, dest, size)])[0]

    def fetch_many(self, items: Iterable[tuple[str, Path] | tuple[str, Path, int | None]]) -> list[bool]:
        """:meth:`fetch` each ``(digest, dest[, size])``: small blobs in batches, large ones by
        ByteStream, on ``jobs`` threads; one bool per item, in order. Waits for all started
        transfers, then raises the first StoreError (the tier switched off) or else the first
        CorruptObject met."""
        wanted = [(self._digest(item[0], item[2] if len(item) > 2 else None), Path(item[1]))
                  for item in items]
        results = [False] * len(wanted)
        small: list[tuple[int, Digest]] = []
        jobs: list[Callable[[], dict[int, bool]]] = []
        for i, (d, dest) in enumerate(wanted):
            if d.size == 0:
                results[i] = d.hash == EMPTY and _write_file(dest, b"")
            elif self._small(d):
                small.append((i, d))
            else:
                jobs.append(partial(self._fetch_stream_at, i, d, dest))
        for group in self._batches(small):
            jobs.append(partial(self._fetch_batch, [(i, d, wanted[i][1]) for i, d in group]))
        for found in parallel(self._jobs, jobs, "ptebuild-grpc"):
            for i, ok in found.items():
                results[i] = ok
        return results

    def _fetch_stream_at(self, i: int, d: Digest, dest: Path) -> dict[int, bool]:
        return {i: self._fetch_stream(d, dest)}

    def _fetch_batch(self, group: list[tuple[int, Digest, Path]]) -> dict[int, bool]:
        """BatchReadBlobs of a group: each blob verified, written, True; absent ones False."""
        found = self._read_batch([d for _, d, _ in group])
        out = {}
        for i, d, dest in group:
            data = found.get(d)
            out[i] = data is not None and _write_file(dest, data)
        return out

    def _read_batch(self, digests: list[Digest], count: bool = True) -> dict[Digest, bytes]:
        """The blobs a BatchReadBlobs call found (checked; absent ones left out). Blobs whose read
        failed are left out after one warning; the first wrong one raises CorruptObject once the
        others are in. ``count``: count them as downloads (an entry's envelope is not)."""
        remaining = list(dict.fromkeys(digests))
        found: dict[Digest, bytes] = {}
        wrong: list[tuple[Digest, bytes]] = []
        what = remaining[0].hash if len(remaining) == 1 else f"{len(remaining)} blobs"

        def attempt() -> None:
            request = reapi.batch_read_blobs_request(self._rpc.instance, remaining)
            answer = self._rpc.unary(reapi.BATCH_READ_BLOBS, request, sum(d.size for d in remaining))
            try:
                responses = reapi.batch_read_blobs_response(answer or b"")
            except FormatError:
                raise Fault("malformed BatchReadBlobsResponse", transient=False) from None
            fault: Fault | None = None
            for digest, data, status in responses:
                if digest not in remaining:
                    continue
                self._rpc.count("bytes_down", len(data))
                if status.code == 5:  # NOT_FOUND
                    remaining.remove(digest)
                    self._known(digest, False)
                elif not status.ok:
                    fault = fault or status_fault(status)
                else:
                    remaining.remove(digest)
                    if len(data) == digest.size and hash_bytes(data) == digest.hash:
                        found[digest] = data
                    else:
                        wrong.append((digest, data))
            if fault is not None and remaining:
                raise fault

        self._rpc.call("BatchReadBlobs", what, attempt)  # a fault: what was found before it is kept
        for digest in found:
            if count:
                self._rpc.count("downloads")
            self._known(digest, True)
        if wrong:
            digest, data = wrong[0]
            self._rpc.failed(f"BatchReadBlobs {digest.hash}", "wrong bytes")
            raise CorruptObject(f"blob {short(digest.hash)} has wrong bytes ({len(data)} bytes hashing to "
                                f"{short(hash_bytes(data))})")
        return found

    def _fetch_stream(self, d: Digest, dest: Path, count: bool = True) -> bool:
        """ByteStream Read into ``dest``, like the HTTP tier's GET: a temporary file next to it,
        renamed into place once its SHA-256 is right."""
        what = f"blobs/{d}"
        broken = [""]  # why the last try broke off mid-stream

        def attempt() -> tuple[str, int] | None:
            broken[0] = ""
            found = [False]

            def fill(write: Sink) -> tuple[str, int, str]:
                found[0], got, size, why = self._rpc.read(d, write)
                return got, size, why

            got, size, why = download(dest, d.hash, fill, lambda n: self._rpc.count("bytes_down", n))
            if why:
                broken[0] = why
                raise Fault(why)
            return (got, size) if found[0] else None

        ok, result = self._rpc.call("ByteStream.Read", what, attempt, warn_give_up=False)
        if not ok:
            if broken[0]:
                raise CorruptObject(f"blob {short(d.hash)} did not arrive whole in {self._rpc.retries + 1} tries "
                                    f"(last: {result})")
            self._rpc.warn(f"ByteStream.Read {what}: {result}; treated as a miss")
            return False
        if result is None:
            self._known(d, False)
            return False
        got, size = result
        if got != d.hash:
            self._rpc.failed(f"ByteStream.Read {what}", "wrong bytes")
            raise CorruptObject(f"blob {short(d.hash)} has wrong bytes ({size} bytes hashing to {short(got)})")
        if count:
            self._rpc.count("downloads")
        self._known(d, True)
        return True

    def read_bytes(self, d: Digest) -> bytes | None:
        """A small blob's bytes (an entry's envelope), checked; None if absent or unreadable (one
        warning). Raises CorruptObject on wrong bytes, StoreError if the tier is switched off."""
        if d.size > MAX_ENTRY_BYTES:
            return None
        if d.size == 0:
            return b"" if d.hash == EMPTY else None
        if self._small(d):
            return self._read_batch([d], count=False).get(d)
        import tempfile

        with tempfile.TemporaryDirectory(prefix="ptebuild-grpc-") as folder:
            dest = Path(folder, "blob")
            return dest.read_bytes() if self._fetch_stream(d, dest, count=False) else None

    # -- writing --------------------------------------------------------------------------------

    def uploads_on(self) -> bool:
        """True if uploads are on: asked for, not turned off, and the server takes them."""
        if not self._upload or self._rpc.upload_off:
            return False
        if not self._rpc.capabilities().update_enabled:
            self._rpc.turn_uploads_off("UpdateActionResult", "the server takes no action results from clients")
            return False
        return True

    def put_file(self, path: Path, digest: str | None = None) -> tuple[str, int]:
        """Upload the file's bytes (streamed) if the server lacks them; return ``(sha256, size)``.

        ``digest`` is trusted if given (the front end hashed the file; the server checks it
        again); else the file is hashed first. With uploads off, nothing is sent. A failed upload
        is warned about and remembered: no entry naming this blob is uploaded in this build.
        Raises StoreError if the tier is switched off, OSError if the file cannot be read.
        """
        return self.put_many([(path, digest)])[0]

    def put_many(self, items: Iterable[tuple[Path, str | None]]) -> list[tuple[str, int]]:
        """:meth:`put_file` each ``(path, digest)``: one FindMissingBlobs for all, then small
        blobs in batches and large ones by ByteStream, on ``jobs`` threads; results in order."""
        named = []
        for path, digest in items:
            if digest is None:
                digest, size = hash_file(path)
            else:
                check_digest(digest)
                size = os.stat(path).st_size
            named.append((Path(path), Digest(digest, size)))
        if not named or not self.uploads_on():
            return [(d.hash, d.size) for _, d in named]
        missing = self._find_missing([d for _, d in named])
        if missing is None:  # warned: nothing is uploaded, nothing named by an entry
            with self._lock:
                self._failed.update(d.hash for _, d in named if d.hash not in self._present)
            return [(d.hash, d.size) for _, d in named]
        sources: dict[Digest, Path | bytes] = {d: path for path, d in named}
        small = [(0, d) for d in missing if self._small(d)]
        jobs: list[Callable[[], dict[int, bool]]] = [
            partial(self._upload_stream_job, d, sources[d]) for d in missing if not self._small(d)]
        jobs += [partial(self._upload_batch, [(d, sources[d]) for _, d in group]) for group in self._batches(small)]
        parallel(self._jobs, jobs, "ptebuild-grpc")
        return [(d.hash, d.size) for _, d in named]

    def put_bytes(self, data: bytes) -> bool:
        """Upload a small blob (an entry's envelope); True if the server has it (else one warning)."""
        d = Digest.of(data)
        if not self.uploads_on():
            return False
        missing = self._find_missing([d])
        if missing is None:
            return False
        if not missing:
            return True
        if self._small(d):
            return self._upload_batch([(d, data)], count=False).get(0, False)
        return self._upload_stream(d, data, count=False)

    def _upload_batch(self, group: list[tuple[Digest, Path | bytes]], count: bool = True) -> dict[int, bool]:
        """BatchUpdateBlobs of a group (each blob's bytes read into memory: it is small).
        ``count``: count them as uploads (an entry's envelope is not: its entry is)."""
        blobs = {d: source if isinstance(source, bytes) else Path(source).read_bytes() for d, source in group}
        remaining = list(blobs)
        what = remaining[0].hash if len(remaining) == 1 else f"{len(remaining)} blobs"

        def attempt() -> None:
            request = reapi.batch_update_blobs_request(self._rpc.instance, [(d, blobs[d]) for d in remaining])
            answer = self._rpc.unary(reapi.BATCH_UPDATE_BLOBS, request)
            try:
                responses = reapi.batch_update_blobs_response(answer or b"")
            except FormatError:
                raise Fault("malformed BatchUpdateBlobsResponse", transient=False) from None
            fault: Fault | None = None
            for digest, status in responses:
                if digest not in remaining:
                    continue
                if status.ok:
                    remaining.remove(digest)
                    if count:
                        self._rpc.count("uploads")
                    self._rpc.count("bytes_up", digest.size)
                    self._known(digest, True)
                else:
                    fault = fault or status_fault(status)
            if remaining:
                raise fault or Fault("the server did not answer for every blob")

        ok, _ = self._rpc.call("BatchUpdateBlobs", what, attempt, upload=True)
        with self._lock:
            for d in remaining:
                self._failed.add(d.hash)
                self._present.discard(d.hash)
        return {0: ok}

    def _upload_stream_job(self, d: Digest, source: Path | bytes) -> dict[int, bool]:
        return {0: self._upload_stream(d, source)}

    def _upload_stream(self, d: Digest, source: Path | bytes, count: bool = True) -> bool:
        ok, _ = self._rpc.call("ByteStream.Write", f"blobs/{d}", lambda: self._rpc.write(d, source), upload=True)
        if ok:
            if count:
                self._rpc.count("uploads")
            self._rpc.count("bytes_up", d.size)
            self._known(d, True)
        else:
            with self._lock:
                self._failed.add(d.hash)
                self._present.discard(d.hash)
        return bool(ok)


def _write_file(dest: Path, data: bytes) -> bool:
    """Write ``data`` (checked already) to the new file ``dest`` through a temporary file next to it."""
    tmp = part_path(dest)
    try:
        with open(tmp, "xb") as out:
            out.write(data)
        os.replace(tmp, dest)
    except BaseException:
        unlink(tmp)
        raise
    return True
