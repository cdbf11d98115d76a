"""The small protocols a cache tier implements, and the registry of tier kinds.

A tier is a pair of stores, as in Bazel's remote cache protocol and dvc-data's object databases:

- a :class:`BlobStore`: bytes named by their SHA-256 (``/cas/<sha256>``; a REAPI server names
  them by SHA-256 and size, which callers pass where they know it);
- an :class:`ActionStore`: action key -> a JSON document (``/ac/<key>``), the
  :class:`~ptebuild.results.ActionResult` of that action.

The builder never sees a tier: it talks to :class:`ptebuild.store.frontend.Cache`, which asks the
tiers in order (local first), verifies every blob it takes from one, copies remote hits into the
local tier and switches off, on its own, a tier that raises :class:`~ptebuild.errors.StoreError`.
A tier therefore raises StoreError only for "this tier cannot be used now" (server down, disk
read-only); an entry that is simply absent is ``None`` / ``False``; bytes that do not hash to
their name raise :class:`~ptebuild.errors.CorruptObject` and are never handed on.

A new tier kind is one module with a class implementing :class:`Tier` plus one line in
:data:`TIER_MODULES` (and, for a remote one, its URL schemes in :data:`TIER_SCHEMES`). The local
tier offers more (:class:`LocalStore`: the stat cache, locks, the ``--explain`` history); the
front end uses those only through it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import filelock

    from ptebuild.store.cas import CAS

Warn = Callable[[str], None]
"""Where a tier reports a problem it recovered from (one line, no credentials)."""

#: Tier kind -> "module:class" under ptebuild.store.
TIER_MODULES = {
    "local": "ptebuild.store.local:LocalTier",
    "http": "ptebuild.store.http:HttpTier",
    "grpc": "ptebuild.store.grpc:GrpcTier",
}

#: A remote cache URL's scheme -> the tier kind that speaks it.
TIER_SCHEMES = {
    "http": "http",
    "https": "http",
    "grpc": "grpc",
    "grpcs": "grpc",
}


@runtime_checkable
class BlobStore(Protocol):
    def has(self, digest: str, size: int | None = None) -> bool:
        """True if the blob is stored (its bytes are checked when fetched)."""

    def fetch(self, digest: str, dest: Path, size: int | None = None) -> bool:
        """Write the blob to ``dest`` (a new file), verified; False if absent.

        Raises CorruptObject if the bytes do not hash to ``digest`` (``dest`` is then removed).
        """

    def put_file(self, path: Path, digest: str | None = None) -> tuple[str, int]:
        """Store the file's bytes (streamed); return ``(sha256, size)``."""


@runtime_checkable
class ActionStore(Protocol):
    def get(self, key: str) -> dict[str, Any] | None:
        """The document stored under ``key``, or None (absent, damaged or refused)."""

    def put(self, key: str, document: dict[str, Any], refs: list[str]) -> None:
        """Store ``document`` under ``key``; ``refs`` are the blobs it names (already stored)."""


@runtime_checkable
class Tier(Protocol):
    # Read-only members: a tier may answer them with a plain attribute or a property (the remote
    # tier's ``writable`` changes when the server refuses an upload), and its stores with
    # classes of its own.
    @property
    def name(self) -> str:
        """For messages: ``local cache /root/.cache/ptebuild``, ``remote cache http://host:8080``."""

    @property
    def source(self) -> str:
        """``"local"`` or ``"remote"``: what a hit from this tier is reported as."""

    @property
    def writable(self) -> bool: ...

    @property
    def blobs(self) -> BlobStore: ...

    @property
    def actions(self) -> ActionStore: ...

    def stats(self) -> dict[str, Any]:
        """Counters of this build (hits, misses, bytes down and up, errors...)."""

    def close(self) -> None: ...


@runtime_checkable
class LocalStore(Tier, Protocol):
    """The tier whose ``source`` is ``"local"``: this machine's folder, with what only it offers."""

    @property
    def cas(self) -> CAS:
        """The folder's blob store itself: where this machine's workers write what they build
        (:meth:`ptebuild.store.frontend.Cache.output_store`)."""

    def digest_file(self, path: Path) -> tuple[str, int]:
        """``(sha256, size)`` of a file, through the folder's stat cache."""

    def lock(self, key: str) -> filelock.FileLock:
        """The inter-process lock of an action key (not yet acquired)."""

    def entry_file(self, key: str) -> Path:
        """The file of an action entry (its stat stands for it in a no-op stamp)."""

    def last(self, history_id: str) -> dict[str, Any] | None:
        """The entry last stored for ``history_id`` (a manifest's program), or None."""

    def set_last(self, history_id: str, key: str) -> None: ...

    def count(self, hit: bool) -> None:
        """Count one action-cache hit or miss (persisted)."""


@dataclass(frozen=True)
class RemoteSettings:
    """What opens a remote tier, resolved (headers parsed, the secret read): a build's, and what a
    task carries to the node that opens its own (:mod:`ptebuild.builder.executors.ray`).

    Its repr names the URL and the headers, never a header's value or the secret.
    """

    url: str
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    upload: bool = True
    secret: bytes | None = field(default=None, repr=False)

    @classmethod
    def of(cls, url: str, headers: Mapping[str, str] | None = None, upload: bool = True,
           secret: bytes | None = None) -> RemoteSettings:
        return cls(url, tuple((headers or {}).items()), upload, secret)

    def __repr__(self) -> str:
        from ptebuild.store.headers import sanitize_url

        names = ", ".join(name for name, _ in self.headers)
        return (f"RemoteSettings({sanitize_url(self.url)!r}, headers=[{names}], upload={self.upload}, "
                f"signed={self.secret is not None})")


def remote_kind(url: str) -> str:
    """The tier kind of a remote cache URL (:data:`TIER_SCHEMES`); UsageError if none speaks it."""
    from urllib.parse import urlsplit

    from ptebuild.errors import UsageError
    from ptebuild.store.headers import sanitize_url

    scheme = urlsplit(url).scheme.lower()
    if scheme not in TIER_SCHEMES:
        known = ", ".join(f"{s}://" for s in TIER_SCHEMES)
        raise UsageError(f"--remote-cache: {sanitize_url(url)!r} is not a URL of a remote cache; give {known}host[:port]...")
    return TIER_SCHEMES[scheme]


def open_remote(settings: RemoteSettings, warn: Warn, **tuning: Any) -> Tier:
    """The remote tier for ``settings``, of the kind its URL's scheme names. ``tuning``: the
    tier's ``timeout``, ``retries``, ``jobs``... Raises UsageError for an unusable URL or header."""
    return open_tier(remote_kind(settings.url), settings.url, headers=dict(settings.headers), upload=settings.upload,
                     secret=settings.secret, warn=warn, **tuning)


def open_tier(kind: str, *args: Any, **kwargs: Any) -> Tier:
    """Instantiate the tier kind registered as ``kind``."""
    import importlib

    module_name, _, class_name = TIER_MODULES[kind].partition(":")
    tier: Tier = getattr(importlib.import_module(module_name), class_name)(*args, **kwargs)
    return tier
