"""Action cache: action key -> JSON record of what the action produced, plus "last record per program".

Layout::

    actions/<2 hex>/<key>.json     one record per action key (key: lowercase hex, 16-128 chars)
    last/<program>.key             the key of the last record stored for a program (text, one line)

A record file is a header line then the canonical JSON of the body (sorted keys, no spaces)::

    ptebuild-action 1 <sha256 hex of the body bytes>\\n
    {"key": "...", "program": "...", "record": {...}, "refs": ["<digest>", ...], "stored": <unix s>}\\n

``record`` is the builder's dict, returned as is by :meth:`ActionCache.get`. ``refs`` lists the
blobs the record needs; gc never deletes a blob a kept record refers to, and verify drops a
record whose blobs are gone. By default refs are every ``"digest"`` value found (at any depth)
under ``record["outputs"]``.

Records are written atomically (temp file in the same folder, fsync, ``os.replace``). A file
that is truncated, garbled, of another version or whose checksum fails is a miss (it is removed
on sight). The file's mtime is its last use: :meth:`ActionCache.get` touches it on a hit, and gc
evicts the least recently used records first.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ptebuild import hashing
from ptebuild.canonical import canonical_bytes
from ptebuild.errors import REPORT, StoreError
from ptebuild.store import _fs

MAGIC = b"ptebuild-action"
VERSION = 1

_KEY_RE = re.compile(r"[0-9a-f]{16,128}")
_SAFE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")


def check_key(key: str) -> str:
    """Validate an action key (lowercase hex, 16 to 128 characters); raise StoreError if not."""
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise StoreError(f"not a valid action key (lowercase hex, 16-128 characters): {key!r}; {REPORT}")
    return key


def encode(body: dict[str, Any]) -> bytes:
    """The bytes of a record file for ``body``."""
    data = canonical_bytes(body)
    header = b"%s %d %s\n" % (MAGIC, VERSION, hashlib.sha256(data).hexdigest().encode())
    return header + data + b"\n"


def decode(raw: bytes) -> dict[str, Any] | None:
    """The body of a record file, or None if it is truncated, garbled or of another version."""
    import json

    header, sep, rest = raw.partition(b"\n")
    if not sep or not rest.endswith(b"\n"):
        return None
    parts = header.split(b" ")
    if len(parts) != 3 or parts[0] != MAGIC or parts[1] != b"%d" % VERSION:
        return None
    data = rest[:-1]
    if hashlib.sha256(data).hexdigest().encode() != parts[2]:
        return None
    try:
        body = json.loads(data)
    except ValueError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("record"), dict):
        return None
    refs = body.get("refs")
    if not isinstance(refs, list) or not all(hashing.is_digest(r) for r in refs):
        return None
    return body


def _record(body: dict[str, Any]) -> dict[str, Any]:
    """The record of a body :func:`decode` accepted (it checked that the record is a dict)."""
    record: dict[str, Any] = body["record"]
    return record


def default_refs(record: dict[str, Any]) -> list[str]:
    """Every ``"digest"`` value (a SHA-256 hex) found at any depth under ``record["outputs"]``."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "digest" and hashing.is_digest(v):
                    found.add(v)
                else:
                    walk(v)
        elif isinstance(node, (list, tuple)):
            for v in node:
                walk(v)

    walk(record.get("outputs"))
    return sorted(found)


def program_file_name(program_id: str) -> str:
    """File name (without suffix) of a program's "last" pointer: the name if safe, else its hash."""
    if _SAFE_NAME_RE.fullmatch(program_id):
        return program_id
    return "h-" + hashlib.sha256(program_id.encode()).hexdigest()[:32]


class ActionCache:
    """Action records under ``<store>/actions`` and per-program pointers under ``<store>/last``."""

    def __init__(self, root: Path, last_root: Path) -> None:
        self.root = root
        self.last_root = last_root

    def path(self, key: str) -> Path:
        """Where the record of ``key`` lives."""
        check_key(key)
        return self.root / key[:2] / f"{key}.json"

    def read(self, key: str) -> dict[str, Any] | None:
        """The full body of ``key``'s record (without touching its last-use time), or None.

        A damaged record is removed and reads as None.
        """
        path = self.path(key)
        try:
            raw = path.read_bytes()
        except OSError:
            return None
        body = decode(raw)
        if body is None or body.get("key") != key:
            _fs.unlink_quietly(path)
            return None
        return body

    def get(self, key: str) -> dict[str, Any] | None:
        """The record stored for ``key``, or None (a miss; a damaged record is a miss too).

        A hit refreshes the record's last-use time (best effort). Counts nothing.
        """
        body = self.read(key)
        if body is None:
            return None
        try:
            os.utime(self.path(key))
        except OSError:
            pass
        return _record(body)

    def put(
        self, key: str, program_id: str | None, record: dict[str, Any], refs: list[str] | None = None
    ) -> None:
        """Store ``record`` for ``key`` atomically and (with a ``program_id``) make it that
        program's last record.

        ``refs`` are the blob digests the record needs (default: :func:`default_refs`).
        Raises StoreError if the record cannot be encoded or the cache cannot be written.
        """
        refs = sorted(set(default_refs(record) if refs is None else refs))
        for r in refs:
            if not hashing.is_digest(r):
                raise StoreError(f"action {key}: not a SHA-256 hex digest in refs: {r!r}; {REPORT}")
        body = {
            "key": check_key(key),
            "program": program_id if program_id is not None else record.get("target", ""),
            "record": record,
            "refs": refs,
            "stored": round(time.time(), 3),
        }
        try:
            data = encode(body)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"action {key}: the record is not JSON-serialisable: {exc}; {REPORT}") from None
        _fs.atomic_write_bytes(self.path(key), data, what="write the action record")
        if program_id is not None:
            self.set_last(program_id, key)

    def set_last(self, program_id: str, key: str) -> None:
        """Make ``key``'s record the last one of ``program_id`` (for --explain)."""
        pointer = self.last_root / f"{program_file_name(program_id)}.key"
        data = f"{check_key(key)} {program_id}\n".encode()
        try:
            if pointer.read_bytes() == data:
                return  # a no-op build writes nothing
        except OSError:
            pass
        _fs.atomic_write_bytes(pointer, data, what="write the last-record pointer")

    def last_for(self, program_id: str) -> dict[str, Any] | None:
        """The record last stored for ``program_id`` (by any process), or None."""
        pointer = self.last_root / f"{program_file_name(program_id)}.key"
        try:
            line = pointer.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        key, _, rest = line.rstrip("\n").partition(" ")
        if rest != program_id or not _KEY_RE.fullmatch(key):
            return None
        body = self.read(key)
        if body is None:
            return None
        return _record(body)

    def remove(self, key: str) -> bool:
        """Delete ``key``'s record; True if it was there."""
        return _fs.unlink_quietly(self.path(key))

    def __iter__(self) -> Iterator[tuple[str, Path]]:
        """Every record file as ``(key, path)``; temporary files are skipped."""
        for shard, entry in _fs.sharded_files(self.root):
            key = entry.name[:-5]
            if entry.name.endswith(".json") and _KEY_RE.fullmatch(key) and key.startswith(shard):
                yield key, Path(entry.path)
