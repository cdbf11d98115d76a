"""What both remote tiers share: the tier, the action store's skeleton, parallel transfers.

The HTTP tier (:mod:`.http`) and the gRPC tier (:mod:`.grpc`) differ in their protocol only: how
a URL is read, how requests travel (:mod:`.http_client`, :mod:`.grpc_channel`: each a
:class:`~ptebuild.store.faults.Budget` with its retries, failure budget and counters), how blobs
move. What is the same is here:

- :class:`RemoteTier`: the constructor (the tuning every remote tier takes, the headers checked,
  then the protocol's :meth:`RemoteTier.connect` and its two stores), ``writable``,
  ``disabled``, ``stats``, ``close``;
- :class:`RemoteActionStore`: ``get`` and ``put`` of an entry (:mod:`.entries`: a REAPI
  ``ActionResult`` naming the outputs and ptebuild's envelope): a miss counted, an entry refused
  with one warning, an entry never uploaded before every blob it names is on the server, its
  envelope last; the protocol reads and writes the ``ActionResult`` itself;
- :func:`parallel`: transfers on ``jobs`` threads, the first error raised once all are done;
  :func:`download`: a blob streams into a temporary file beside its destination, hashed as it
  goes, renamed into place only when whole and right.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ptebuild.errors import CorruptObject, StoreError
from ptebuild.hashing import is_digest
from ptebuild.store import entries
from ptebuild.store.faults import Budget
from ptebuild.store.headers import parse_header
from ptebuild.store.reapi import ActionResult, Digest

_T = TypeVar("_T")


@dataclass(frozen=True)
class Tuning:
    """How a remote tier talks to its server (the keyword arguments of every remote tier).

    ``warn``: receives one line per fault recovered from (calls are serialised). ``timeout``:
    seconds (HTTP: to connect and for each read; gRPC: per MiB an RPC carries). ``retries``: extra
    tries of a failed request. ``jobs``: parallel transfers. ``max_failures``: failed requests
    after which the tier raises StoreError for the rest of the build. ``backoff``: the first
    retry's delay in seconds, doubled for each next one."""

    warn: Callable[[str], None]
    timeout: float
    retries: int
    jobs: int
    max_failures: int
    backoff: float


class Transport(Budget):
    """A remote tier's transport: its :class:`~ptebuild.store.faults.Budget`, and ``close``."""

    def close(self) -> None:
        """Release connections (nothing by default)."""


class RemoteBlobs(Protocol):
    """What the action store needs of its tier's blob store."""

    def refs_missing(self, refs: Iterable[Digest]) -> list[str]: ...

    def put_bytes(self, data: bytes) -> bool: ...


def tier_name(url: str) -> str:
    """``remote cache <url>``: how a tier names itself (``url`` already without credentials)."""
    return f"remote cache {url}"


class RemoteTier:
    """A remote cache tier (implements :class:`~ptebuild.store.tiers.Tier`); a protocol subclasses
    it with :meth:`connect`, :meth:`blob_store` and :meth:`action_store`.

    ``url``: the server (userinfo allowed, sent as Basic auth, never printed). ``headers``: extra
    request headers or metadata, e.g. ``{"Authorization": "Bearer ..."}`` (never printed).
    ``upload``: False for a read-only client (pull requests): nothing is sent. ``secret``: HMAC
    key; entries are signed on upload and checked on read. The rest is :class:`Tuning`.

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
        checked = dict(parse_header(f"{k}={v}", "remote cache header") for k, v in (headers or {}).items())
        tuning = Tuning(warn, timeout, retries, jobs, max_failures, backoff)
        self.url, self._transport = self.connect(url, checked, tuning)
        self.name = self._transport.name
        self._upload = upload
        self.blobs = self.blob_store(upload, jobs)
        self.actions = self.action_store(upload, secret or None)

    # -- what a protocol provides ---------------------------------------------------------------

    def connect(self, url: str, headers: dict[str, str], tuning: Tuning) -> tuple[str, Transport]:
        """``(the URL as printed, the transport named tier_name(it))``; UsageError if unusable."""
        raise NotImplementedError

    def blob_store(self, upload: bool, jobs: int) -> Any:
        raise NotImplementedError

    def action_store(self, upload: bool, secret: bytes | None) -> Any:
        raise NotImplementedError

    # -- the same for every protocol ------------------------------------------------------------

    @property
    def writable(self) -> bool:
        """True while uploads are on (off with ``upload=False``, after refused credentials on an
        upload, or when the server takes no uploads)."""
        return self._upload and not self._transport.upload_off

    @property
    def disabled(self) -> str | None:
        """Why the tier is switched off for this build, or None."""
        return self._transport.disabled

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"

    def stats(self) -> dict[str, Any]:
        """hits, misses, refused (entries refused: bad signature...), downloads, uploads (blobs and
        entries), errors (failed requests), bytes_down, bytes_up (:mod:`.faults`), disabled (bool)."""
        return self._transport.stats()

    def close(self) -> None:
        """Close the connections."""
        self._transport.close()


Opened = Callable[[], tuple[str, "dict[str, Any] | None"]]
"""Opens an entry read from the server: ``(why it is refused, or "", the document or None)``."""


class RemoteActionStore:
    """A remote tier's entries (implements :class:`~ptebuild.store.tiers.ActionStore`): the skeleton
    of ``get`` and ``put``; a protocol reads and writes the ``ActionResult`` (:meth:`read_entry`,
    :meth:`write_entry`)."""

    def __init__(self, transport: Budget, blobs: RemoteBlobs, upload: bool, secret: bytes | None) -> None:
        self._t = transport
        self._blobs = blobs
        self._upload = upload
        self._secret = secret

    def __repr__(self) -> str:
        return f"<actions of {self._t.name}{' (signed)' if self._secret else ''}>"

    # -- what a protocol provides ---------------------------------------------------------------

    def read_entry(self, key: str) -> Opened | None:
        """The entry of ``key`` as the server has it, to be opened; None if absent or the read
        failed (warned)."""
        raise NotImplementedError

    def write_entry(self, key: str, result: ActionResult) -> int | None:
        """Store ``result`` as the entry of ``key``: the bytes sent, or None if it failed (warned)."""
        raise NotImplementedError

    def can_upload(self) -> bool:
        """Whether the server takes entries now (after the tier's own checks; default: yes)."""
        return True

    def found(self, document: dict[str, Any]) -> None:
        """An entry was accepted (a protocol may learn from it; default: nothing)."""

    # -- the same for every protocol ------------------------------------------------------------

    def get(self, key: str) -> dict[str, Any] | None:
        """The document stored under ``key``, or None (absent, faulty, or refused with a warning)."""
        opened = self.read_entry(key)
        if opened is None:
            self._t.count("misses")
            return None
        document = entries.accept(self._t, key, opened)
        if document is not None:
            self.found(document)
        return document

    def put(self, key: str, document: dict[str, Any], refs: list[str]) -> None:
        """Upload ``document`` under ``key`` (signed if a secret is set), if every ref is on the server.

        With uploads off, nothing is sent. A ref whose upload failed in this build, or that the
        server lacks, keeps the entry back (one warning): an entry never names a missing blob.
        Raises StoreError if the tier is switched off, ValueError if ``refs`` are not the blobs of
        the document's outputs.
        """
        entries.action_digest(key)
        refs = sorted({check_digest(r) for r in refs})
        if not self._upload or self._t.upload_off:
            return
        self._t.check_on()
        envelope, result = entries.pack(key, document, refs, self._secret)
        if not self.can_upload():
            return
        outputs = sorted({f.digest for f in result.output_files if f.path != entries.ENTRY_PATH}, key=lambda d: d.hash)
        missing = self._blobs.refs_missing(outputs)
        if not entries.may_upload(self._t, key, envelope, missing) or not self._blobs.put_bytes(envelope):
            return
        sent = self.write_entry(key, result)
        if sent is not None:
            self._t.count("uploads")
            self._t.count("bytes_up", sent)


def check_digest(digest: str) -> str:
    """``digest`` if it is a SHA-256 (64 lowercase hex), else ValueError."""
    if not is_digest(digest):
        raise ValueError(f"not a SHA-256 digest (64 lowercase hex): {digest!r}")
    return digest


def short(digest: str) -> str:
    """A digest as messages name it (12 characters)."""
    return digest[:12]


def part_path(dest: Path) -> Path:
    """A new temporary file's path beside ``dest``, for a download on its way there."""
    return dest.parent / f".{dest.name}.{os.urandom(6).hex()}.part"


def unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


Sink = Callable[[bytes | bytearray | memoryview], object]
"""Where a download's bytes go (a file's ``write``)."""


def download(dest: Path, expected: str, fill: Callable[[Sink], tuple[str, int, str]],
             counted: Callable[[int], None]) -> tuple[str, int, str]:
    """Stream a blob into the new file ``dest``, verified: ``fill(write)`` passes its bytes to
    ``write`` and returns ``(their SHA-256, their size, why it broke off or "")``. They go to a
    temporary file beside ``dest`` (``counted(bytes written)`` either way), renamed into place only
    when whole and hashing to ``expected``, else removed (also when ``fill`` raises). Returns what
    ``fill`` returned."""
    tmp = part_path(dest)
    try:
        with open(tmp, "xb") as out:
            try:
                got, size, why = fill(out.write)
            finally:
                counted(out.tell())
    except BaseException:
        unlink(tmp)
        raise
    if why or got != expected:
        unlink(tmp)
        return got, size, why
    try:
        os.replace(tmp, dest)
    except BaseException:
        unlink(tmp)
        raise
    return got, size, ""


def parallel(jobs: int, calls: Sequence[Callable[[], _T]], thread_name: str) -> list[_T]:
    """Run ``calls`` on up to ``jobs`` threads; their answers, in order. Waits for every started
    one, then raises the first StoreError (the tier switched off) or else the first error."""
    if len(calls) <= 1:
        return [call() for call in calls]
    with ThreadPoolExecutor(max_workers=min(max(1, jobs), len(calls)), thread_name_prefix=thread_name) as pool:
        futures: list[Future[_T]] = [pool.submit(call) for call in calls]
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
