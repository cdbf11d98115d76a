"""Helpers of the HTTP tier's tests: random blobs, a tier with short timeouts, an action document."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

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


def document(key: str, digests: list[str]) -> dict:
    return {
        "format": "ptebuild-action",
        "version": 2,
        "key": key,
        "target": "policy_xnnpack",
        "kind": "program",
        "outputs": [{"name": f"f{i}.pte", "sha256": d, "bytes": 1} for i, d in enumerate(digests)],
    }


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".part"))
