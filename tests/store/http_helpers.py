"""Helpers of the remote tiers' tests: random blobs, a tier with short timeouts, an action
document, and the files of an entry as nginx stores them."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ptebuild.store import entries, reapi
from ptebuild.store.http import HttpTier

TOKEN = "tok-5e3c7a91d2"
KEY = "0123456789abcdef" * 2
OTHER_KEY = "fedcba9876543210" * 2


def blob(tmp_path: Path, name: str, size: int) -> tuple[Path, str]:
    path = tmp_path / name
    data = os.urandom(size)
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def tier(url: str, warnings: list[str] | None = None, **kwargs) -> HttpTier:
    kwargs.setdefault("timeout", 2.0)
    kwargs.setdefault("backoff", 0.01)
    return HttpTier(url, warn=(warnings.append if warnings is not None else lambda s: None), **kwargs)


def grpc_tier(url: str, warnings: list[str] | None = None, **kwargs):
    """A :class:`~ptebuild.store.grpc.GrpcTier` with the short timeouts of :func:`tier`."""
    from ptebuild.store.grpc import GrpcTier

    kwargs.setdefault("timeout", 2.0)
    kwargs.setdefault("backoff", 0.01)
    return GrpcTier(url, warn=(warnings.append if warnings is not None else lambda s: None), **kwargs)


def document(key: str, digests: list[str], sizes: list[int] | None = None) -> dict:
    """An action document naming ``digests`` (of ``sizes`` bytes: 1 each if not given)."""
    sizes = sizes or [1] * len(digests)
    return {
        "format": "ptebuild-action",
        "version": 2,
        "key": key,
        "target": "policy_xnnpack",
        "kind": "program",
        "outputs": [{"name": f"f{i}.pte", "sha256": d, "bytes": n} for i, (d, n) in enumerate(zip(digests, sizes))],
    }


def entry_path(key: str) -> str:
    """Where an entry of ``key`` lies on an HTTP cache: ``ac/<its action digest>``."""
    return f"ac/{entries.action_digest(key).hash}"


def stored_entry(folder: Path, key: str) -> tuple[reapi.ActionResult, bytes]:
    """The ActionResult of ``key``'s entry in an nginx cache folder, and its envelope's bytes."""
    result = reapi.ActionResult.decode((folder / entry_path(key)).read_bytes())
    (entry,) = [f for f in result.output_files if f.path == entries.ENTRY_PATH]
    return result, (folder / "cas" / entry.digest.hash).read_bytes()


def store_entry(folder: Path, key: str, envelope: bytes, files: list[reapi.OutputFile]) -> None:
    """Write an entry by hand into an nginx cache folder: the envelope's blob and an ActionResult
    naming ``files`` and it (what a tampering server or a bug could leave there)."""
    (folder / "cas").mkdir(parents=True, exist_ok=True)
    (folder / "ac").mkdir(parents=True, exist_ok=True)
    (folder / "cas" / hashlib.sha256(envelope).hexdigest()).write_bytes(envelope)
    result = reapi.ActionResult((*files, reapi.OutputFile(entries.ENTRY_PATH, reapi.Digest.of(envelope))))
    (folder / entry_path(key)).write_bytes(result.encode())


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".part"))
