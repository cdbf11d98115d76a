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
server, its envelope last.

A blob whose bytes do not hash to its name raises :class:`~ptebuild.errors.CorruptObject` at once
(it counts as a failed request; it is not retried: the server's bytes for a name do not change),
and the partial file is removed: nothing is published. Requests, retries, timeouts and the
failure budget are :mod:`ptebuild.store.http_client`'s.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ptebuild.errors import CorruptObject, StoreError
from ptebuild.hashing import hash_bytes, hash_chunks, hash_file, is_digest
from ptebuild.store import entries
from ptebuild.store.headers import make_auth, parse_header, split_url
from ptebuild.store.http_client import CHUNK, Client, Fault, describe, status_fault
from ptebuild.store.reapi import Digest
from ptebuild.store.signing import MAX_ENTRY_BYTES, open_entry

_T = TypeVar("_T")


def _short(digest: str) -> str:
    return digest[:12]


def _check_digest(digest: str) -> str:
    if not is_digest(digest):
        raise ValueError(f"not a SHA-256 digest (64 lowercase hex): {digest!r}")
    return digest


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
        path = f"cas/{_check_digest(digest)}"

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
        path = f"cas/{_check_digest(digest)}"
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
                tmp = dest.parent / f".{dest.name}.{os.urandom(6).hex()}.part"
                try:
                    with open(tmp, "xb") as out:
                        try:
                            got, size = hash_chunks(resp.iter_content(CHUNK), out.write)
                        except requests.RequestException as exc:
                            why = describe(exc, self._c.timeout)
                        else:
                            why = ""
                        finally:
                            self._c.count("bytes_down", out.tell())
                except BaseException:
                    _unlink(tmp)
                    raise
                if why:
                    _unlink(tmp)
                    body_fault[0] = True
                    raise Fault(why)
                if got != digest:
                    _unlink(tmp)
                    return got, size
                try:
                    os.replace(tmp, dest)
                except BaseException:
                    _unlink(tmp)
                    raise
                return digest, size

        ok, result = self._c.call("GET", path, attempt, warn_give_up=False)
        if not ok:
            if body_fault[0]:  # reported by the exception, not by a warning too
                raise CorruptObject(
                    f"blob {_short(digest)} did not arrive whole in {self._c.retries + 1} tries (last: {result})"
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
                f"blob {_short(digest)} has wrong bytes ({size} bytes hashing to {_short(got)})"
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
            _check_digest(digest)
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
        return self._many(self.fetch, list(items))

    def put_many(self, items: Iterable[tuple[Path, str | None]]) -> list[tuple[str, int]]:
        """:meth:`put_file` each ``(path, digest)`` on ``jobs`` threads; results in order."""
        return self._many(self.put_file, list(items))

    def _many(self, fn: Callable[..., _T], items: list[tuple[Any, ...]]) -> list[_T]:
        if len(items) <= 1:
            return [fn(*item) for item in items]
        with ThreadPoolExecutor(max_workers=min(self._jobs, len(items)), thread_name_prefix="ptebuild-remote") as pool:
            futures = [pool.submit(fn, *item) for item in items]
            errors: list[BaseException] = []
            results: list[_T] = []
            for fut in futures:
                try:
                    results.append(fut.result())
                except BaseException as exc:
                    errors.append(exc)  # the results are not returned then: the first error is raised
                    for other in futures:
                        other.cancel()
        if errors:
            hard = [e for e in errors if isinstance(e, StoreError) and not isinstance(e, CorruptObject)]
            raise (hard or errors)[0]
        return results

    def read_bytes(self, digest: Digest) -> bytes | None:
        """A small blob's bytes (an entry's envelope), checked against ``digest``; None if it is
        absent or could not be read (one warning). Raises CorruptObject on wrong bytes, StoreError
        if the tier is switched off."""
        path = f"cas/{_check_digest(digest.hash)}"

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
            got = "more bytes than its size" if data is None else f"{len(data)} bytes hashing to {_short(hash_bytes(data))}"
            raise CorruptObject(f"blob {_short(digest.hash)} has wrong bytes ({got})")
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

    def refs_missing(self, refs: Iterable[str]) -> list[str]:
        """The refs not known to be on the server (failed uploads; others checked with HEAD)."""
        missing = []
        for ref in refs:
            with self._lock:
                failed, present = ref in self._failed, ref in self._present
            if failed or (not present and not self.has(ref)):
                missing.append(ref)
        return missing


class HttpActionStore:
    """``/ac/<digest>``: entries as REAPI ActionResults (:mod:`.entries`), and those of the earlier
    layout. Implements :class:`~ptebuild.store.tiers.ActionStore`."""

    def __init__(self, client: Client, blobs: HttpBlobStore, upload: bool, secret: bytes | None) -> None:
        self._c = client
        self._blobs = blobs
        self._upload = upload
        self._secret = secret

    def __repr__(self) -> str:
        return f"<actions of {self._c.name}{' (signed)' if self._secret else ''}>"

    def _read(self, path: str) -> tuple[bool, bool, bytes | None]:
        """``(answered, found, body)``: the body is None when larger than an entry may be."""

        def attempt() -> tuple[bool, bytes | None]:
            resp = self._c.request("GET", path, stream=True)
            with resp:
                if resp.status_code == 404:
                    return False, None
                if resp.status_code != 200:
                    raise status_fault(resp)
                return True, _small_body(self._c, resp, MAX_ENTRY_BYTES)

        ok, answer = self._c.call("GET", path, attempt)
        return (True, *answer) if ok else (False, False, None)

    def get(self, key: str) -> dict[str, Any] | None:
        """The document stored under ``key``, or None (absent, faulty, or refused with a warning)."""
        ok, found, raw = self._read(f"ac/{entries.action_digest(key).hash}")
        earlier = ok and not found
        if earlier:
            ok, found, raw = self._read(f"ac/{key}")
        if not ok or not found:
            self._c.count("misses")
            return None

        def opened() -> tuple[str, dict[str, Any] | None]:
            if raw is None:
                return f"larger than {MAX_ENTRY_BYTES >> 20} MiB", None
            if earlier:
                return open_entry(key, raw, self._secret)
            return entries.read(key, raw, self._blobs.read_bytes, self._secret)

        return entries.accept(self._c, key, opened)

    def put(self, key: str, document: dict[str, Any], refs: list[str]) -> None:
        """Upload ``document`` under ``key`` (signed if a secret is set), if every ref is on the server.

        With uploads off, nothing is sent. A ref whose upload failed in this build, or that the
        server lacks, keeps the entry back (one warning): an entry never names a missing blob.
        Raises StoreError if the tier is switched off, ValueError if ``refs`` are not the blobs of
        the document's outputs.
        """
        path = f"ac/{entries.action_digest(key).hash}"
        refs = sorted({_check_digest(r) for r in refs})
        if not self._upload or self._c.upload_off:
            return
        self._c.check_on()
        envelope, result = entries.pack(key, document, refs, self._secret)
        if not entries.may_upload(self._c, key, envelope, self._blobs.refs_missing(refs)) or not self._blobs.put_bytes(envelope):
            return
        body = result.encode()

        def attempt() -> None:
            resp = self._c.request("PUT", path, data=body, headers={"Content-Type": "application/octet-stream"})
            with resp:
                if resp.status_code not in (200, 201, 204):
                    raise status_fault(resp)

        ok, _ = self._c.call("PUT", path, attempt, upload=True)
        if ok:
            self._c.count("uploads")
            self._c.count("bytes_up", len(body))


class HttpTier:
    """A remote cache tier over Bazel's HTTP cache protocol (see the module docstring).

    ``url``: the cache's base URL (userinfo allowed, sent as Basic auth, never printed).
    ``headers``: extra request headers, e.g. ``{"Authorization": "Bearer ..."}`` (never printed).
    ``upload``: False for a read-only client (pull requests): ``put*`` send nothing.
    ``secret``: HMAC key; entries are signed on upload and checked on read.
    ``warn``: receives one line per fault recovered from (thread-safe: calls are serialised).
    ``timeout``: seconds for connecting and for each read. ``retries``: extra tries of a failed
    request. ``jobs``: parallel transfers (and pooled connections). ``max_failures``: failed
    requests after which the tier raises StoreError for the rest of the build. ``backoff``: the
    first retry's delay in seconds, doubled for each next one.

    Raises UsageError if the URL or a header is unusable.
    """

    source = "remote"

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        upload: bool = True,
        secret: bytes | None = None,
        warn: Callable[[str], None] = lambda s: None,
        timeout: float = 10.0,
        retries: int = 2,
        jobs: int = 4,
        max_failures: int = 3,
        backoff: float = 0.1,
    ) -> None:
        base, userinfo = split_url(url)
        checked = dict(parse_header(f"{k}={v}", "remote cache header") for k, v in (headers or {}).items())
        self.name = f"remote cache {base}"
        self.url = base
        self._client = Client(
            base,
            make_auth(checked, userinfo),
            name=self.name,
            warn=warn,
            timeout=timeout,
            retries=retries,
            jobs=jobs,
            max_failures=max_failures,
            backoff=backoff,
        )
        self.blobs = HttpBlobStore(self._client, upload, jobs)
        self.actions = HttpActionStore(self._client, self.blobs, upload, secret or None)
        self._upload = upload

    @property
    def writable(self) -> bool:
        """True while uploads are on (off with ``upload=False`` or after a 401/403 on a PUT)."""
        return self._upload and not self._client.upload_off

    @property
    def disabled(self) -> str | None:
        """Why the tier is switched off for this build, or None."""
        return self._client.disabled

    def __repr__(self) -> str:
        return f"<HttpTier {self.url}>"

    def stats(self) -> dict[str, Any]:
        """hits, misses, refused (entries refused: bad signature...), downloads, uploads (blobs and
        entries), errors (failed requests), bytes_down, bytes_up, disabled (bool)."""
        with self._client.lock:
            out: dict[str, Any] = dict(self._client.counts)
        out["disabled"] = self._client.disabled is not None
        return out

    def close(self) -> None:
        """Close the pooled connections."""
        self._client.session.close()


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


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
