"""The remote cache tier: Bazel's HTTP cache protocol, spoken with ``requests``.

Any server of Bazel's HTTP remote cache works: bazel-remote (its entries are checked by default,
and these pass), or nginx with WebDAV uploads (``dav_methods PUT; create_full_put_path on;
client_max_body_size 0;``). Buildbarn, BuildBuddy and the other REAPI servers speak gRPC only:
:mod:`ptebuild.store.grpc`. Protocol: https://bazel.build/remote/caching#http-caching

Wire format
===========

The base URL ``U`` (see :mod:`ptebuild.store.headers`: userinfo is Basic auth, never printed)
has two namespaces, as Bazel lays them out::

    GET | HEAD | PUT  U/cas/<sha256>   a blob: its raw bytes; <sha256> is 64 lowercase hex
    GET | PUT         U/ac/<digest>    an action entry: a REAPI ActionResult (:mod:`.entries`), under
                                       the 64-hex action digest of ptebuild's key
    GET               U/ac/<key>       an entry of the earlier layout, ptebuild's JSON envelope under
                                       its 16-128 hex key: read when the first is absent, never written

Status codes: ``200`` a hit; ``404`` absent (a miss, not an error); ``200``/``201``/``204`` a
stored PUT. Blobs are uploaded and downloaded streamed (``Content-Length`` set, 1 MiB chunks)
and never held in memory. PUT always writes (no HEAD first), so an upload repairs a damaged blob
on the server. An action entry names its outputs and ptebuild's own signed-or-plain JSON
envelope (:mod:`ptebuild.store.signing`, at most 4 MiB), which is a blob of its own: its layout
is in :mod:`ptebuild.store.entries`. An entry is uploaded only once every blob it names is on the
server, its envelope last (:class:`~ptebuild.store.remote.RemoteActionStore`, the gRPC tier's too).

A blob whose bytes do not hash to its name raises :class:`~ptebuild.errors.CorruptObject` at once
(it counts as a failed request; it is not retried: the server's bytes for a name do not change),
and the partial file is removed: nothing is published. Requests, retries, timeouts and the
failure budget are :mod:`ptebuild.store.http_client`'s.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

from ptebuild.errors import CorruptObject
from ptebuild.hashing import hash_bytes, hash_chunks, hash_file
from ptebuild.store import entries
from ptebuild.store.headers import make_auth, split_url
from ptebuild.store.http_client import CHUNK, Client, Fault, describe, status_fault
from ptebuild.store.reapi import ActionResult, Digest
from ptebuild.store.remote import (
    Opened,
    RemoteActionStore,
    RemoteTier,
    Sink,
    Transport,
    Tuning,
    check_digest,
    download,
    parallel,
    short,
    tier_name,
)
from ptebuild.store.signing import MAX_ENTRY_BYTES, open_entry


class HttpBlobStore:
    """``/cas/<sha256>``: blobs, streamed and verified. Implements :class:`~ptebuild.store.tiers.BlobStore`."""

    def __init__(self, client: Client, upload: bool, jobs: int) -> None:
        self._c = client
        self._upload = upload
        self._jobs = max(1, jobs)
        self._lock = threading.Lock()
        self._present: set[str] = set()
        """Blobs known to be on the server in this build (uploaded, fetched or seen by has)."""
        self._failed: set[str] = set()
        """Blobs whose upload failed in this build: no entry naming them is uploaded."""

    def __repr__(self) -> str:
        return f"<blobs of {self._c.name}>"

    def _known(self, digest: str, present: bool) -> None:
        with self._lock:
            if present:
                self._present.add(digest)
                self._failed.discard(digest)
            else:
                self._present.discard(digest)

    def has(self, digest: str, size: int | None = None) -> bool:
        """True if the server has the blob (HEAD). A fault is a False, after one warning."""
        path = f"cas/{check_digest(digest)}"

        def attempt() -> bool:
            resp = self._c.request("HEAD", path)
            with resp:
                if resp.status_code == 404:
                    return False
                if resp.status_code != 200:
                    raise status_fault(resp)
                return True

        ok, found = self._c.call("HEAD", path, attempt)
        found = bool(ok and found)
        self._known(digest, found)
        return found

    def fetch(self, digest: str, dest: Path, size: int | None = None) -> bool:
        """Download the blob into the new file ``dest``, verified while streaming; False if absent.

        The bytes go to a temporary file next to ``dest``, renamed into place once their SHA-256
        is ``digest``. Raises CorruptObject on wrong bytes (or a body truncated on every try),
        StoreError if the tier is switched off, OSError if ``dest``'s folder cannot be written.
        """
        path = f"cas/{check_digest(digest)}"
        dest = Path(dest)
        body_fault = [False]  # the last try failed while reading the body

        def attempt() -> tuple[str, int] | None:
            import requests

            body_fault[0] = False
            resp = self._c.request("GET", path, stream=True)
            with resp:
                if resp.status_code == 404:
                    return None
                if resp.status_code != 200:
                    raise status_fault(resp)

                def fill(write: Sink) -> tuple[str, int, str]:
                    try:
                        return (*hash_chunks(resp.iter_content(CHUNK), write), "")
                    except requests.RequestException as exc:
                        return "", 0, describe(exc, self._c.timeout)

                got, size, why = download(dest, digest, fill, lambda n: self._c.count("bytes_down", n))
                if why:
                    body_fault[0] = True
                    raise Fault(why)
                return got, size

        ok, result = self._c.call("GET", path, attempt, warn_give_up=False)
        if not ok:
            if body_fault[0]:  # reported by the exception, not by a warning too
                raise CorruptObject(
                    f"blob {short(digest)} did not arrive whole in {self._c.retries + 1} tries (last: {result})"
                )
            self._c.warn(f"GET {path}: {result}; treated as a miss")
            return False
        if result is None:
            self._known(digest, False)
            return False
        got, size = result
        if got != digest:
            self._c.failed(f"GET {path}", "wrong bytes")
            raise CorruptObject(
                f"blob {short(digest)} has wrong bytes ({size} bytes hashing to {short(got)})"
            )
        self._c.count("downloads")
        self._known(digest, True)
        return True

    def put_file(self, path: Path, digest: str | None = None) -> tuple[str, int]:
        """Upload the file's bytes (streamed) to ``/cas/<digest>``; return ``(sha256, size)``.

        ``digest`` is trusted if given (the front end hashed the file); else the file is hashed
        first. With uploads off, nothing is sent. A failed upload is warned about and remembered:
        no action entry naming this blob is uploaded in this build. Raises StoreError if the
        tier is switched off, OSError if the file cannot be read.
        """
        path = Path(path)
        if digest is None:
            digest, size = hash_file(path)
        else:
            check_digest(digest)
            size = os.stat(path).st_size
        if not self._upload or self._c.upload_off:
            return digest, size
        rel = f"cas/{digest}"

        def attempt() -> None:
            with open(path, "rb") as body:
                resp = self._c.request(
                    "PUT", rel, data=body, headers={"Content-Type": "application/octet-stream"}
                )
            with resp:
                if resp.status_code not in (200, 201, 204):
                    raise status_fault(resp)

        ok, _ = self._c.call("PUT", rel, attempt, upload=True)
        if ok:
            self._c.count("uploads")
            self._c.count("bytes_up", size)
            self._known(digest, True)
        else:
            with self._lock:
                self._failed.add(digest)
                self._present.discard(digest)
        return digest, size

    def fetch_many(self, items: Iterable[tuple[str, Path] | tuple[str, Path, int]]) -> list[bool]:
        """:meth:`fetch` each ``(digest, dest[, size])`` on ``jobs`` threads; one bool per item, in order.

        Waits for all started transfers, then raises the first StoreError (the tier switched off)
        or else the first CorruptObject met.
        """
        return parallel(self._jobs, [partial(self.fetch, *item) for item in items], "ptebuild-remote")

    def put_many(self, items: Iterable[tuple[Path, str | None]]) -> list[tuple[str, int]]:
        """:meth:`put_file` each ``(path, digest)`` on ``jobs`` threads; results in order."""
        return parallel(self._jobs, [partial(self.put_file, *item) for item in items], "ptebuild-remote")

    def read_bytes(self, digest: Digest) -> bytes | None:
        """A small blob's bytes (an entry's envelope), checked against ``digest``; None if it is
        absent or could not be read (one warning). Raises CorruptObject on wrong bytes, StoreError
        if the tier is switched off."""
        path = f"cas/{check_digest(digest.hash)}"

        def attempt() -> tuple[bool, bytes | None]:
            resp = self._c.request("GET", path, stream=True)
            with resp:
                if resp.status_code == 404:
                    return False, None
                if resp.status_code != 200:
                    raise status_fault(resp)
                return True, _small_body(self._c, resp, digest.size)

        ok, answer = self._c.call("GET", path, attempt)
        if not ok or not answer[0]:
            return None
        data = answer[1]
        if data is None or hash_bytes(data) != digest.hash:
            self._c.failed(f"GET {path}", "wrong bytes")
            got = "more bytes than its size" if data is None else f"{len(data)} bytes hashing to {short(hash_bytes(data))}"
            raise CorruptObject(f"blob {short(digest.hash)} has wrong bytes ({got})")
        self._known(digest.hash, True)  # not counted as a download: it is part of the entry's hit
        return bytes(data)

    def put_bytes(self, data: bytes) -> bool:
        """Upload a small blob (an entry's envelope); True if the server stored it (else one warning)."""
        digest = hash_bytes(data)
        rel = f"cas/{digest}"

        def attempt() -> None:
            resp = self._c.request("PUT", rel, data=data, headers={"Content-Type": "application/octet-stream"})
            with resp:
                if resp.status_code not in (200, 201, 204):
                    raise status_fault(resp)

        ok, _ = self._c.call("PUT", rel, attempt, upload=True)
        if ok:  # not counted as an upload: the entry it belongs to is
            self._c.count("bytes_up", len(data))
            self._known(digest, True)
        return ok

    def refs_missing(self, refs: Iterable[Digest]) -> list[str]:
        """The refs not known to be on the server (failed uploads; others checked with HEAD)."""
        missing = []
        for ref in (d.hash for d in refs):
            with self._lock:
                failed, present = ref in self._failed, ref in self._present
            if failed or (not present and not self.has(ref)):
                missing.append(ref)
        return missing


class HttpActionStore(RemoteActionStore):
    """``/ac/<digest>``: entries as REAPI ActionResults (:mod:`.entries`), and those of the earlier
    layout (read, never written)."""

    _t: Client
    _blobs: HttpBlobStore

    def _read(self, path: str) -> tuple[bool, bool, bytes | None]:
        """``(answered, found, body)``: the body is None when larger than an entry may be."""

        def attempt() -> tuple[bool, bytes | None]:
            resp = self._t.request("GET", path, stream=True)
            with resp:
                if resp.status_code == 404:
                    return False, None
                if resp.status_code != 200:
                    raise status_fault(resp)
                return True, _small_body(self._t, resp, MAX_ENTRY_BYTES)

        ok, answer = self._t.call("GET", path, attempt)
        return (True, *answer) if ok else (False, False, None)

    def read_entry(self, key: str) -> Opened | None:
        ok, found, raw = self._read(f"ac/{entries.action_digest(key).hash}")
        earlier = ok and not found
        if earlier:
            ok, found, raw = self._read(f"ac/{key}")
        if not ok or not found:
            return None

        def opened() -> tuple[str, dict[str, Any] | None]:
            if raw is None:
                return f"larger than {MAX_ENTRY_BYTES >> 20} MiB", None
            if earlier:
                return open_entry(key, raw, self._secret)
            return entries.read(key, raw, self._blobs.read_bytes, self._secret)

        return opened

    def write_entry(self, key: str, result: ActionResult) -> int | None:
        path = f"ac/{entries.action_digest(key).hash}"
        body = result.encode()

        def attempt() -> None:
            resp = self._t.request("PUT", path, data=body, headers={"Content-Type": "application/octet-stream"})
            with resp:
                if resp.status_code not in (200, 201, 204):
                    raise status_fault(resp)

        ok, _ = self._t.call("PUT", path, attempt, upload=True)
        return len(body) if ok else None


class HttpTier(RemoteTier):
    """A remote cache tier over Bazel's HTTP cache protocol (see the module docstring).

    ``url``: the cache's base URL (userinfo allowed, sent as Basic auth, never printed).
    ``timeout``: seconds for connecting and for each read; ``jobs`` also sizes the pool of
    connections. The other arguments are every remote tier's (:class:`~.remote.RemoteTier`).

    Raises UsageError if the URL or a header is unusable.
    """

    _transport: Client

    def connect(self, url: str, headers: dict[str, str], tuning: Tuning) -> tuple[str, Transport]:
        base, userinfo = split_url(url)
        client = Client(base, make_auth(headers, userinfo), name=tier_name(base), warn=tuning.warn,
                        timeout=tuning.timeout, retries=tuning.retries, jobs=tuning.jobs,
                        max_failures=tuning.max_failures, backoff=tuning.backoff)
        return base, client

    def blob_store(self, upload: bool, jobs: int) -> HttpBlobStore:
        return HttpBlobStore(self._transport, upload, jobs)

    def action_store(self, upload: bool, secret: bytes | None) -> HttpActionStore:
        return HttpActionStore(self._transport, self.blobs, upload, secret)


def _small_body(client: Client, resp: Any, limit: int) -> bytes | None:
    """A response's whole body, at most ``limit`` bytes (None if it is longer); a transport error
    while it streams raises :class:`Fault`."""
    import requests

    data = bytearray()
    why = ""
    try:
        for chunk in resp.iter_content(64 << 10):
            data += chunk
            if len(data) > limit:
                return None
    except requests.RequestException as exc:
        why = describe(exc, client.timeout)
    finally:
        client.count("bytes_down", len(data))
    if why:  # raised here, outside the handler: no library exception rides along
        raise Fault(why)
    return bytes(data)

