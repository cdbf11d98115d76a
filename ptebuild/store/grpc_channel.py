"""The gRPC tier's transport: the channel, REAPI's calls in bytes, the server's capabilities, and how
a failed call is described.

Calls are made with grpcio (an optional dependency, ``pip install 'ptebuild[grpc]'``, imported only
when a gRPC tier is opened) on bytes: the messages are :mod:`ptebuild.store.reapi`'s, encoded by
hand (grpcio passes bytes through when a call has no serializer). ByteStream reads and writes
stream in :data:`CHUNK` messages; a batch request carries at most the server's
``max_batch_total_size_bytes`` (Capabilities, asked once) and :data:`MAX_BATCH`.

Faults
======

Every RPC has a deadline of ``timeout`` seconds per MiB it carries (at least one).
``UNAVAILABLE``, ``DEADLINE_EXCEEDED``, ``RESOURCE_EXHAUSTED``, ``ABORTED``, ``INTERNAL`` and
``UNKNOWN`` are transient and retried; ``NOT_FOUND`` is a miss; ``UNAUTHENTICATED`` and
``PERMISSION_DENIED`` are refused credentials. A fault is described by a fixed phrase
(:func:`describe`), never by grpc's text. Retries, warnings and the failure budget are
:mod:`ptebuild.store.faults`' (:class:`Rpc` is a :class:`~ptebuild.store.remote.Transport`).
After ``UNAVAILABLE`` the next call opens a new channel: grpc's own would refuse calls while it
backs off (up to two minutes) before it reconnects.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ptebuild.errors import FormatError, UsageError
from ptebuild.hashing import hash_chunks
from ptebuild.store import reapi
from ptebuild.store.faults import Fault
from ptebuild.store.reapi import Digest
from ptebuild.store.remote import Transport

CHUNK = 1 << 20
"""Bytes per ByteStream message."""
MAX_BATCH = 4 << 20
"""The most bytes of blobs one batch request carries, whatever the server allows."""
BLOB_OVERHEAD = 256
"""Bytes a blob adds to a batch request or response beyond its data (digest, tags, status)."""
_REQUEST_OVERHEAD = 1024

_TRANSIENT = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED", "INTERNAL", "UNKNOWN"})
_AUTH = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})


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


def status_fault(status: reapi.Status) -> Fault:
    """The :class:`Fault` of one blob's status in a batch answer."""
    import grpc

    name = next((c.name for c in grpc.StatusCode if c.value[0] == status.code), f"status {status.code}")
    return Fault(f"gRPC {name}", transient=name in _TRANSIENT, status=status.code, auth=name in _AUTH)


class Rpc(Transport):
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
            for chunk in chunks(source):
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


def chunks(source: Path | bytes) -> Iterator[bytes]:
    if isinstance(source, bytes):
        for at in range(0, len(source), CHUNK):
            yield source[at:at + CHUNK]
        return
    with open(source, "rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk
