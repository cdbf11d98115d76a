"""The gRPC remote cache tier: REAPI v2, the protocol of Bazel's remote caches, spoken with grpcio.

Any REAPI server works: BuildGrid (tested, 0.4.4), Buildbarn (bb-storage), BuildBuddy, EngFlow,
NativeLink, bazel-remote's gRPC port. grpcio is an optional dependency (``pip install
'ptebuild[grpc]'``), imported only here; the messages are :mod:`ptebuild.store.reapi`'s, encoded
by hand (grpcio passes bytes through when a call has no serializer).

URL
===

``grpc://HOST:PORT[/INSTANCE]`` (plain text) or ``grpcs://HOST[:PORT][/INSTANCE]`` (TLS, port 443
by default, the roots grpc bundles or ``$GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``). ``INSTANCE`` is the
REAPI instance name (Bazel's ``--remote_instance_name``), empty by default. ``user:password@`` is
sent as Basic auth; headers (``--remote-cache-header``) are sent as metadata, their names
lowercased (a gRPC metadata key is letters, digits, ``-``, ``_`` and ``.``). Only the URL without
its userinfo is ever printed.

Calls
=====

::

    entries        ActionCache.GetActionResult / UpdateActionResult, under the action digest of
                   ptebuild's key; an entry is an ActionResult naming the outputs and ptebuild's
                   signed envelope (:mod:`ptebuild.store.entries`, the HTTP tier's layout too)
    is it there    ContentAddressableStorage.FindMissingBlobs (one call for all of an entry's blobs)
    small blobs    BatchReadBlobs / BatchUpdateBlobs, several in one request while it stays within
                   the server's max_batch_total_size_bytes (Capabilities, asked once) and 4 MiB
                   (gRPC's default message limit)
    large blobs    ByteStream Read / Write, in 1 MiB messages, streamed from and to the file
    capabilities   Capabilities.GetCapabilities, once, before the first blob transfer: SHA-256 must
                   be offered; an ActionCache that takes no updates turns uploads off

An upload asks FindMissingBlobs first and sends only what the server lacks (a REAPI server checks
the hash of every upload: it holds no damaged blob to repair). The empty blob is never sent nor
asked for: REAPI servers always have it. An entry is uploaded once its blobs are on the server,
its envelope last: BuildGrid drops, on the next read, an entry whose blobs it lacks.

Faults
======

As the HTTP tier's (:mod:`ptebuild.store.faults`). Every RPC has a deadline of ``timeout``
seconds per MiB it carries (at least one). ``UNAVAILABLE``, ``DEADLINE_EXCEEDED``,
``RESOURCE_EXHAUSTED``, ``ABORTED``, ``INTERNAL`` and ``UNKNOWN`` are transient and retried;
``NOT_FOUND`` is a miss; ``UNAUTHENTICATED`` and ``PERMISSION_DENIED`` are refused credentials. A
fault is described by a fixed phrase (:func:`describe`), never by grpc's text. Every blob is
verified as the HTTP tier verifies it: its SHA-256 computed while it streams into a temporary
file next to its destination, renamed into place only when whole and right; wrong bytes raise
:class:`~ptebuild.errors.CorruptObject` at once, a stream cut on every try raises it too.
"""

from __future__ import annotations

import os
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from ptebuild.errors import CorruptObject, FormatError, StoreError, UsageError
from ptebuild.hashing import hash_bytes, hash_chunks, hash_file, is_digest
from ptebuild.store import entries, reapi
from ptebuild.store.faults import Budget, Fault
from ptebuild.store.headers import parse_header, sanitize_url
from ptebuild.store.reapi import Digest
from ptebuild.store.signing import MAX_ENTRY_BYTES

CHUNK = 1 << 20
"""Bytes per ByteStream message."""
MAX_BATCH = 4 << 20
"""The most bytes of blobs one batch request carries, whatever the server allows."""
_BLOB_OVERHEAD = 256
"""Bytes a blob adds to a batch request or response beyond its data (digest, tags, status)."""
_REQUEST_OVERHEAD = 1024

_TRANSIENT = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED", "INTERNAL", "UNKNOWN"})
_AUTH = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})
_METADATA_KEY_RE = re.compile(r"[0-9a-z_.-]+")
EMPTY = hash_bytes(b"")


def split_url(url: str) -> tuple[str, str, str, bool, tuple[str, str] | None]:
    """``(printable URL, host:port target, instance name, TLS?, (user, password) or None)``;
    raise UsageError if the URL is unusable."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise UsageError("--remote-cache: not a valid URL; give grpc[s]://host[:port][/instance]") from None
    safe = sanitize_url(url)
    if parts.scheme not in ("grpc", "grpcs") or not parts.hostname:
        raise UsageError(f"--remote-cache: {safe!r} is not a grpc:// or grpcs:// URL with a host; give grpc[s]://host[:port][/instance]")
    if parts.query or parts.fragment:
        raise UsageError(f"--remote-cache {safe}: a query string or fragment is not supported; "
                         "pass a token with --remote-cache-header NAME=VALUE")
    secure = parts.scheme == "grpcs"
    if port is None and not secure:
        raise UsageError(f"--remote-cache {safe}: a grpc:// URL needs a port; give grpc://host:port")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    userinfo = None
    if "@" in parts.netloc:
        user, _, password = parts.netloc.rpartition("@")[0].partition(":")
        userinfo = (unquote(user), unquote(password))
    return safe, f"{host}:{port or 443}", unquote(parts.path.strip("/")), secure, userinfo


def metadata_of(headers: Mapping[str, str], userinfo: tuple[str, str] | None) -> tuple[tuple[str, str], ...]:
    """The request metadata for ``headers`` (and Basic auth for ``userinfo``); UsageError, naming
    the header and never its value, for a name gRPC cannot carry."""
    import base64

    pairs: dict[str, str] = {}
    for name, value in headers.items():
        key = name.lower()
        if not _METADATA_KEY_RE.fullmatch(key) or key.endswith("-bin") or key.startswith("grpc-"):
            raise UsageError(f"remote cache header {name}: not a gRPC metadata key; use letters, digits, '-', '_' and '.', "
                             "not grpc-* nor *-bin")
        pairs[key] = value
    if userinfo is not None and "authorization" not in pairs:
        pairs["authorization"] = "Basic " + base64.b64encode(f"{userinfo[0]}:{userinfo[1]}".encode()).decode()
    return tuple(sorted(pairs.items()))


def describe(exc: Any, deadline: float) -> Fault:
    """The :class:`Fault` of a failed RPC (a ``grpc.RpcError``): a fixed phrase from its status
    code (and, for ``UNAVAILABLE``, from the kind of transport error), never the text grpc gives."""
    code = exc.code() if callable(getattr(exc, "code", None)) else None
    name = getattr(code, "name", "UNKNOWN")
    details = exc.details() if callable(getattr(exc, "details", None)) else ""
    low = str(details or "").lower()
    if name == "DEADLINE_EXCEEDED":
        why = f"no answer within {deadline:g} s"
    elif name == "UNAVAILABLE":
        if "refused" in low:
            why = "connection refused"
        elif "reset" in low:
            why = "connection reset"
        elif "dns" in low or "resolv" in low or "name or service not known" in low:
            why = "host name not found"
        elif "ssl" in low or "tls" in low or "handshake" in low or "certificate" in low:
            why = "TLS error"
        elif "closed" in low or "eof" in low or "goaway" in low or "broken pipe" in low:
            why = "server closed the connection"
        else:
            why = "server unavailable (gRPC UNAVAILABLE)"
    else:
        why = f"gRPC {name}"
    value = getattr(code, "value", None)
    status = value[0] if isinstance(value, tuple) and value and isinstance(value[0], int) else None
    return Fault(why, transient=name in _TRANSIENT, status=status, auth=name in _AUTH)


def _status_fault(status: reapi.Status) -> Fault:
    """The :class:`Fault` of one blob's status in a batch answer."""
    import grpc

    name = next((c.name for c in grpc.StatusCode if c.value[0] == status.code), f"status {status.code}")
    return Fault(f"gRPC {name}", transient=name in _TRANSIENT, status=status.code, auth=name in _AUTH)


def _short(digest: str) -> str:
    return digest[:12]


class Rpc(Budget):
    """The channel, the calls in bytes, the server's capabilities; the failure budget and counters
    shared by the tier's two stores."""

    def __init__(self, target: str, secure: bool, instance: str, metadata: tuple[tuple[str, str], ...], *,
                 name: str, warn: Callable[[str], None], timeout: float, retries: int, max_failures: int,
                 backoff: float) -> None:
        # grpc's C core logs to stderr (a server that went away, at INFO): ptebuild reports faults itself.
        os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
        try:
            import grpc  # noqa: F401 - missing: one line now, rather than a traceback at the first call
        except ImportError:
            raise UsageError("--remote-cache grpc://: needs grpcio: pip install 'ptebuild[grpc]'") from None
        super().__init__(name=name, warn=warn, timeout=timeout, retries=retries, max_failures=max_failures,
                         backoff=backoff)
        self.instance = instance
        self.metadata = metadata
        self._target, self._secure = target, secure
        self._options = [
            ("grpc.max_receive_message_length", 2 * MAX_BATCH),
            ("grpc.max_send_message_length", 2 * MAX_BATCH),
            ("grpc.enable_retries", 0),  # retries are ours (faults.Budget), counted and reported
            ("grpc.primary_user_agent", "ptebuild"),
            ("grpc.min_reconnect_backoff_ms", max(100, int(timeout * 1000))),  # the connect timeout
            ("grpc.use_local_subchannel_pool", 1),  # a new channel starts afresh (see _calls)
        ]
        self._channels: list[Any] = []
        self._channel_lock = threading.Lock()
        self._current: dict[str, Any] = {}
        self._lost = True
        self._caps: reapi.CacheCapabilities | None = None
        self._caps_lock = threading.Lock()

    def _calls(self) -> dict[str, Any]:
        """The multicallables, of a new channel after the connection was lost: grpc's channel
        would refuse calls at once while it backs off (up to two minutes) before it reconnects,
        where a retry should find a server that came back, as an HTTP request does."""
        import grpc

        with self._channel_lock:
            if self._lost:
                if self._secure:
                    channel = grpc.secure_channel(self._target, grpc.ssl_channel_credentials(), self._options)
                else:
                    channel = grpc.insecure_channel(self._target, self._options)
                self._channels.append(channel)  # the old ones may still carry calls: closed at close()
                calls: dict[str, Any] = {path: channel.unary_unary(path) for path in (
                    reapi.CAPABILITIES, reapi.GET_ACTION_RESULT, reapi.UPDATE_ACTION_RESULT, reapi.FIND_MISSING_BLOBS,
                    reapi.BATCH_UPDATE_BLOBS, reapi.BATCH_READ_BLOBS)}
                calls[reapi.BYTESTREAM_READ] = channel.unary_stream(reapi.BYTESTREAM_READ)
                calls[reapi.BYTESTREAM_WRITE] = channel.stream_unary(reapi.BYTESTREAM_WRITE)
                self._current, self._lost = calls, False
            return self._current

    def _fault(self, exc: Any, deadline: float) -> Fault:
        fault = describe(exc, deadline)
        if fault.status == 14:  # UNAVAILABLE: the connection is gone, or never was
            with self._channel_lock:
                self._lost = True
        return fault

    def close(self) -> None:
        with self._channel_lock:
            channels, self._channels, self._lost = self._channels, [], True
        for channel in channels:
            channel.close()

    def deadline(self, nbytes: int) -> float:
        return self.timeout * max(1, -(-nbytes // CHUNK))

    def unary(self, path: str, request: bytes, nbytes: int = 0) -> bytes | None:
        """One call, no retry: the answer, or None for ``NOT_FOUND``; raises :class:`Fault`."""
        import grpc

        deadline = self.deadline(max(nbytes, len(request)))
        try:
            answer: bytes = self._calls()[path](request, timeout=deadline, metadata=self.metadata)
            return answer
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.NOT_FOUND:
                return None
            fault = self._fault(exc, deadline)
        raise fault

    def read(self, digest: Digest, sink: Callable[[bytes | bytearray | memoryview], object]) -> tuple[bool, str, int, str]:
        """ByteStream Read of a whole blob into ``sink``: ``(found, sha256, size, why it broke off)``.

        A fault before any byte arrived raises :class:`Fault`; one after is returned as ``why``
        (the bytes so far were passed on). More bytes than the digest's size stop the read.
        """
        import grpc

        deadline = self.deadline(digest.size)
        call = self._calls()[reapi.BYTESTREAM_READ](reapi.read_request(reapi.read_resource(self.instance, digest)),
                                                    timeout=deadline, metadata=self.metadata)
        received = [0]

        def chunks() -> Iterator[bytes]:
            for raw in call:
                chunk = reapi.read_response(raw)
                received[0] += len(chunk)
                yield chunk
                if received[0] > digest.size:
                    call.cancel()
                    return

        why = ""
        got, size = "", 0
        try:
            got, size = hash_chunks(chunks(), sink)
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.NOT_FOUND and not received[0]:
                return False, "", 0, ""
            fault = self._fault(exc, deadline)
            if not received[0]:
                raise fault from None
            why = fault.why
        except FormatError:
            why = "malformed ReadResponse"
        if not why and received[0] < digest.size:
            why = "stream ended early"
        return True, got, size, why

    def write(self, digest: Digest, source: Path | bytes) -> None:
        """ByteStream Write of a whole blob; raises :class:`Fault` unless the server committed it all."""
        import grpc

        resource = reapi.write_resource(self.instance, str(uuid.uuid4()), digest)

        def requests() -> Iterator[bytes]:
            offset = 0
            for chunk in _chunks(source):
                end = offset + len(chunk)
                yield reapi.write_request(resource if offset == 0 else "", offset, chunk, end >= digest.size)
                offset = end

        deadline = self.deadline(digest.size)
        try:
            write = self._calls()[reapi.BYTESTREAM_WRITE]
            committed = reapi.write_response(write(requests(), timeout=deadline, metadata=self.metadata))
        except grpc.RpcError as exc:
            fault = self._fault(exc, deadline)
        except FormatError:
            fault = Fault("malformed WriteResponse", transient=False)
        else:
            if committed == digest.size:
                return
            fault = Fault(f"the server committed {committed} of {digest.size} bytes")
        raise fault

    def capabilities(self) -> reapi.CacheCapabilities:
        """The server's cache capabilities, asked once (defaults if it cannot say). Switches the tier
        off if the server offers digests other than SHA-256 only; raises StoreError then."""
        with self._caps_lock:
            if self._caps is None:
                request = reapi.get_capabilities_request(self.instance)

                def attempt() -> reapi.CacheCapabilities:
                    try:
                        answer = self.unary(reapi.CAPABILITIES, request)
                    except Fault as fault:
                        if fault.why == "gRPC UNIMPLEMENTED":  # a server without Capabilities: assume
                            return reapi.CacheCapabilities((reapi.SHA256,), True, 0)
                        raise
                    try:
                        return reapi.server_capabilities(answer or b"")
                    except FormatError:
                        raise Fault("malformed ServerCapabilities", transient=False) from None

                ok, caps = self.call("GetCapabilities", self.instance or '""', attempt)
                self._caps = caps if ok else reapi.CacheCapabilities((reapi.SHA256,), True, 0)
                if self._caps.digest_functions and reapi.SHA256 not in self._caps.digest_functions:
                    self.switch_off("the server offers no SHA-256 digests")
            return self._caps

    def batch_limit(self) -> int:
        """The most bytes of blobs (with their framing) one batch request or answer may carry."""
        server = self.capabilities().max_batch_total_size_bytes
        return min(server, MAX_BATCH) - _REQUEST_OVERHEAD if server > 0 else MAX_BATCH - _REQUEST_OVERHEAD


def _chunks(source: Path | bytes) -> Iterator[bytes]:
    if isinstance(source, bytes):
        for at in range(0, len(source), CHUNK):
            yield source[at:at + CHUNK]
        return
    with open(source, "rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk


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
        if not is_digest(digest):
            raise ValueError(f"not a SHA-256 digest (64 lowercase hex): {digest!r}")
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
        return d.size + _BLOB_OVERHEAD <= self._rpc.batch_limit()

    def _batches(self, items: list[tuple[int, Digest]]) -> list[list[tuple[int, Digest]]]:
        """``items`` in groups whose data fits one batch request or answer."""
        limit = self._rpc.batch_limit()
        groups: list[list[tuple[int, Digest]]] = []
        total = limit
        for item in items:
            cost = item[1].size + _BLOB_OVERHEAD
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
        for found in self._parallel(jobs):
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
                    fault = fault or _status_fault(status)
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
            raise CorruptObject(f"blob {_short(digest.hash)} has wrong bytes ({len(data)} bytes hashing to "
                                f"{_short(hash_bytes(data))})")
        return found

    def _fetch_stream(self, d: Digest, dest: Path, count: bool = True) -> bool:
        """ByteStream Read into ``dest``, like the HTTP tier's GET: a temporary file next to it,
        renamed into place once its SHA-256 is right."""
        what = f"blobs/{d}"
        broken = [""]  # why the last try broke off mid-stream

        def attempt() -> tuple[str, int] | None:
            broken[0] = ""
            tmp = dest.parent / f".{dest.name}.{os.urandom(6).hex()}.part"
            try:
                with open(tmp, "xb") as out:
                    try:
                        found, got, size, why = self._rpc.read(d, out.write)
                    finally:
                        self._rpc.count("bytes_down", out.tell())
            except BaseException:
                _unlink(tmp)
                raise
            if not found or why or got != d.hash:
                _unlink(tmp)
                if why:
                    broken[0] = why
                    raise Fault(why)
                return (got, size) if found else None
            try:
                os.replace(tmp, dest)
            except BaseException:
                _unlink(tmp)
                raise
            return got, size

        ok, result = self._rpc.call("ByteStream.Read", what, attempt, warn_give_up=False)
        if not ok:
            if broken[0]:
                raise CorruptObject(f"blob {_short(d.hash)} did not arrive whole in {self._rpc.retries + 1} tries "
                                    f"(last: {result})")
            self._rpc.warn(f"ByteStream.Read {what}: {result}; treated as a miss")
            return False
        if result is None:
            self._known(d, False)
            return False
        got, size = result
        if got != d.hash:
            self._rpc.failed(f"ByteStream.Read {what}", "wrong bytes")
            raise CorruptObject(f"blob {_short(d.hash)} has wrong bytes ({size} bytes hashing to {_short(got)})")
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
                if not is_digest(digest):
                    raise ValueError(f"not a SHA-256 digest (64 lowercase hex): {digest!r}")
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
        self._parallel(jobs)
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
                    fault = fault or _status_fault(status)
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

    # -- threads --------------------------------------------------------------------------------

    def _parallel(self, jobs: list[Callable[[], dict[int, bool]]]) -> list[dict[int, bool]]:
        """Run ``jobs`` on up to ``jobs`` threads; their answers, in order. Waits for all started
        ones, then raises the first StoreError (the tier switched off) or else the first error."""
        if len(jobs) <= 1:
            return [job() for job in jobs]
        with ThreadPoolExecutor(max_workers=min(self._jobs, len(jobs)), thread_name_prefix="ptebuild-grpc") as pool:
            futures: list[Future[dict[int, bool]]] = [pool.submit(job) for job in jobs]
            errors: list[BaseException] = []
            results = []
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


class GrpcActionStore:
    """The ActionCache: entries as REAPI ActionResults (:mod:`.entries`). Implements
    :class:`~ptebuild.store.tiers.ActionStore`."""

    def __init__(self, rpc: Rpc, blobs: GrpcBlobStore, upload: bool, secret: bytes | None) -> None:
        self._rpc = rpc
        self._blobs = blobs
        self._upload = upload
        self._secret = secret

    def __repr__(self) -> str:
        return f"<actions of {self._rpc.name}{' (signed)' if self._secret else ''}>"

    def get(self, key: str) -> dict[str, Any] | None:
        """The document stored under ``key``, or None (absent, faulty, or refused with a warning)."""
        action = entries.action_digest(key)
        request = reapi.get_action_result_request(self._rpc.instance, action)

        def attempt() -> bytes | None:
            answer = self._rpc.unary(reapi.GET_ACTION_RESULT, request)
            if answer is not None:
                self._rpc.count("bytes_down", len(answer))
            return answer

        ok, raw = self._rpc.call("GetActionResult", action.hash, attempt)
        if not ok or raw is None:
            self._rpc.count("misses")
            return None
        document = entries.accept(self._rpc, key, lambda: entries.read(key, raw, self._blobs.read_bytes, self._secret))
        if document is not None:
            self._blobs.learn(f.digest for f in entries.files(document))
        return document

    def put(self, key: str, document: dict[str, Any], refs: list[str]) -> None:
        """Upload ``document`` under ``key`` (signed if a secret is set), if every ref is on the server.

        With uploads off, nothing is sent. A ref whose upload failed in this build, or that the
        server lacks, keeps the entry back (one warning). Raises StoreError if the tier is
        switched off, ValueError if ``refs`` are not the blobs of the document's outputs.
        """
        action = entries.action_digest(key)
        refs = sorted(set(refs))
        if not self._upload or self._rpc.upload_off:
            return
        self._rpc.check_on()
        envelope, result = entries.pack(key, document, refs, self._secret)
        if not self._blobs.uploads_on():
            return
        outputs = {f.digest for f in result.output_files if f.path != entries.ENTRY_PATH}
        missing = self._blobs.refs_missing(sorted(outputs, key=lambda d: d.hash))
        if not entries.may_upload(self._rpc, key, envelope, missing) or not self._blobs.put_bytes(envelope):
            return
        request = reapi.update_action_result_request(self._rpc.instance, action, result)
        ok, _ = self._rpc.call("UpdateActionResult", action.hash,
                               lambda: self._rpc.unary(reapi.UPDATE_ACTION_RESULT, request), upload=True)
        if ok:
            self._rpc.count("uploads")
            self._rpc.count("bytes_up", len(request))


class GrpcTier:
    """A remote cache tier over REAPI's gRPC services (see the module docstring).

    ``url``: ``grpc://host:port[/instance]`` or ``grpcs://...`` (userinfo allowed, sent as Basic
    auth, never printed). ``headers``: extra metadata, e.g. ``{"Authorization": "Bearer ..."}``
    (never printed). ``upload``: False for a read-only client. ``secret``: HMAC key; entries are
    signed on upload and checked on read. ``warn``: receives one line per fault recovered from.
    ``timeout``: seconds an RPC may take per MiB it carries. ``retries``: extra tries of a failed
    RPC. ``jobs``: parallel transfers. ``max_failures``: failed RPCs after which the tier raises
    StoreError for the rest of the build. ``backoff``: the first retry's delay in seconds, doubled
    for each next one.

    Raises UsageError if the URL or a header is unusable, or grpcio is not installed.
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
        safe, target, instance, secure, userinfo = split_url(url)
        checked = dict(parse_header(f"{k}={v}", "remote cache header") for k, v in (headers or {}).items())
        self.name = f"remote cache {safe}"
        self.url = safe
        self.instance = instance
        self._rpc = Rpc(target, secure, instance, metadata_of(checked, userinfo), name=self.name, warn=warn,
                        timeout=timeout, retries=retries, max_failures=max_failures, backoff=backoff)
        self.blobs = GrpcBlobStore(self._rpc, upload, jobs)
        self.actions = GrpcActionStore(self._rpc, self.blobs, upload, secret or None)
        self._upload = upload

    @property
    def writable(self) -> bool:
        """True while uploads are on (off with ``upload=False``, after refused credentials on an
        upload, or when the server takes no action results)."""
        return self._upload and not self._rpc.upload_off

    @property
    def disabled(self) -> str | None:
        """Why the tier is switched off for this build, or None."""
        return self._rpc.disabled

    def __repr__(self) -> str:
        return f"<GrpcTier {self.url}>"

    def stats(self) -> dict[str, Any]:
        """The counters of :mod:`ptebuild.store.faults`, and ``disabled``."""
        return self._rpc.stats()

    def close(self) -> None:
        """Close the channels."""
        self._rpc.close()


def _write_file(dest: Path, data: bytes) -> bool:
    """Write ``data`` (checked already) to the new file ``dest`` through a temporary file next to it."""
    tmp = dest.parent / f".{dest.name}.{os.urandom(6).hex()}.part"
    try:
        with open(tmp, "xb") as out:
            out.write(data)
        os.replace(tmp, dest)
    except BaseException:
        _unlink(tmp)
        raise
    return True


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
