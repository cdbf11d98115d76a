"""Canonical JSON: sorted keys, no spaces, UTF-8. What ptebuild hashes, signs and compares."""

from __future__ import annotations

from typing import Any


def canonical_json(value: Any) -> str:
    import json  # here, not at the top: importing ptebuild.store stays light

    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_bytes(value: Any) -> bytes:
    return canonical_json(value).encode()
