"""The small protocols a cache tier implements, and the registry of tier kinds.

A tier is a pair of stores, as in Bazel's remote cache protocol and dvc-data's object databases:

- a :class:`BlobStore`: bytes named by their SHA-256 (``/cas/<sha256>``);
- an :class:`ActionStore`: action key -> a JSON document (``/ac/<key>``), the
  :class:`~ptebuild.results.ActionResult` of that action.

The builder never sees a tier: it talks to :class:`ptebuild.store.frontend.Cache`, which asks the
tiers in order (local first), verifies every blob it takes from one, copies remote hits into the
local tier and switches off, on its own, a tier that raises :class:`~ptebuild.errors.StoreError`.
A tier therefore raises StoreError only for "this tier cannot be used now" (server down, disk
read-only); an entry that is simply absent is ``None`` / ``False``; bytes that do not hash to
their name raise :class:`~ptebuild.errors.CorruptObject` and are never handed on.

A new tier kind is one module with a class implementing :class:`Tier` plus one line in
:data:`TIER_MODULES`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

Warn = Callable[[str], None]
"""Where a tier reports a problem it recovered from (one line, no credentials)."""

#: Tier kind -> "module:class" under ptebuild.store.
TIER_MODULES = {
    "local": "ptebuild.store.local:LocalTier",
    "http": "ptebuild.store.http:HttpTier",
}


@runtime_checkable
class BlobStore(Protocol):
    def has(self, digest: str) -> bool:
        """True if the blob is stored (its bytes are checked when fetched)."""

    def fetch(self, digest: str, dest: Path) -> bool:
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
    name: str
    """For messages: ``local cache /root/.cache/ptebuild``, ``remote cache http://host:8080``."""
    source: str
    """``"local"`` or ``"remote"``: what a hit from this tier is reported as."""
    writable: bool
    blobs: BlobStore
    actions: ActionStore

    def stats(self) -> dict[str, Any]:
        """Counters of this build (hits, misses, bytes down and up, errors...)."""

    def close(self) -> None: ...


def open_tier(kind: str, *args, **kwargs) -> Tier:
    """Instantiate the tier kind registered as ``kind``."""
    import importlib

    module_name, _, class_name = TIER_MODULES[kind].partition(":")
    return getattr(importlib.import_module(module_name), class_name)(*args, **kwargs)
