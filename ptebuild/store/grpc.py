"""The gRPC remote cache tier: REAPI v2, the protocol of Bazel's remote caches, spoken with grpcio.

Any REAPI server works: BuildGrid (tested, 0.4.4), Buildbarn (bb-storage), BuildBuddy, EngFlow,
NativeLink, bazel-remote's gRPC port. grpcio is an optional dependency (``pip install
'ptebuild[grpc]'``), imported only when a gRPC tier is opened; the messages are
:mod:`ptebuild.store.reapi`'s, encoded by hand (grpcio passes bytes through when a call has no
serializer).

The tier is split by job, as the HTTP one: the URL and metadata (:mod:`.grpc_url`), the channel
and its calls (:mod:`.grpc_channel`), the blobs, batched and streamed (:mod:`.grpc_blobs`), and
here the ActionCache and the tier, on what both remote tiers share (:mod:`.remote`).

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

As the HTTP tier's (:mod:`ptebuild.store.faults`; the calls': :mod:`.grpc_channel`). Every RPC
has a deadline of ``timeout`` seconds per MiB it carries (at least one). ``UNAVAILABLE``, ``DEADLINE_EXCEEDED``,
``RESOURCE_EXHAUSTED``, ``ABORTED``, ``INTERNAL`` and ``UNKNOWN`` are transient and retried;
``NOT_FOUND`` is a miss; ``UNAUTHENTICATED`` and ``PERMISSION_DENIED`` are refused credentials. A
fault is described by a fixed phrase (:func:`describe`), never by grpc's text. Every blob is
verified as the HTTP tier verifies it: its SHA-256 computed while it streams into a temporary
file next to its destination, renamed into place only when whole and right; wrong bytes raise
:class:`~ptebuild.errors.CorruptObject` at once, a stream cut on every try raises it too.
"""

from __future__ import annotations

from typing import Any

from ptebuild.store import entries, reapi
from ptebuild.store.grpc_blobs import GrpcBlobStore
from ptebuild.store.grpc_channel import Rpc
from ptebuild.store.grpc_url import metadata_of, split_url
from ptebuild.store.remote import Opened, RemoteActionStore, RemoteTier, Transport, Tuning, tier_name


class GrpcActionStore(RemoteActionStore):
    """The ActionCache: entries as REAPI ActionResults (:mod:`.entries`), under the action digest
    of the key (GetActionResult / UpdateActionResult)."""

    _t: Rpc
    _blobs: GrpcBlobStore

    def read_entry(self, key: str) -> Opened | None:
        action = entries.action_digest(key)
        request = reapi.get_action_result_request(self._t.instance, action)

        def attempt() -> bytes | None:
            answer = self._t.unary(reapi.GET_ACTION_RESULT, request)
            if answer is not None:
                self._t.count("bytes_down", len(answer))
            return answer

        ok, raw = self._t.call("GetActionResult", action.hash, attempt)
        if not ok or raw is None:
            return None
        return lambda: entries.read(key, raw, self._blobs.read_bytes, self._secret)

    def found(self, document: dict[str, Any]) -> None:
        self._blobs.learn(f.digest for f in entries.files(document))  # their sizes, for fetching them

    def can_upload(self) -> bool:
        return self._blobs.uploads_on()

    def write_entry(self, key: str, result: reapi.ActionResult) -> int | None:
        action = entries.action_digest(key)
        request = reapi.update_action_result_request(self._t.instance, action, result)
        ok, _ = self._t.call("UpdateActionResult", action.hash,
                             lambda: self._t.unary(reapi.UPDATE_ACTION_RESULT, request), upload=True)
        return len(request) if ok else None


class GrpcTier(RemoteTier):
    """A remote cache tier over REAPI's gRPC services (see the module docstring).

    ``url``: ``grpc://host:port[/instance]`` or ``grpcs://...`` (userinfo allowed, sent as Basic
    auth, never printed). ``headers`` are sent as metadata. ``timeout``: seconds an RPC may take
    per MiB it carries. The other arguments are every remote tier's (:class:`~.remote.RemoteTier`).

    Raises UsageError if the URL or a header is unusable, or grpcio is not installed.
    """

    _transport: Rpc

    def connect(self, url: str, headers: dict[str, str], tuning: Tuning) -> tuple[str, Transport]:
        safe, target, instance, secure, userinfo = split_url(url)
        self.instance = instance
        rpc = Rpc(target, secure, instance, metadata_of(headers, userinfo), name=tier_name(safe), warn=tuning.warn,
                  timeout=tuning.timeout, retries=tuning.retries, max_failures=tuning.max_failures,
                  backoff=tuning.backoff)
        return safe, rpc

    def blob_store(self, upload: bool, jobs: int) -> GrpcBlobStore:
        return GrpcBlobStore(self._transport, upload, jobs)

    def action_store(self, upload: bool, secret: bytes | None) -> GrpcActionStore:
        return GrpcActionStore(self._transport, self.blobs, upload, secret)
