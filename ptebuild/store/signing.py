"""The remote action entry's envelope: ptebuild's own document, its signature, the checks that open it.

A remote entry is a REAPI ``ActionResult`` that names the outputs and this envelope, a CAS blob
of its own (:mod:`ptebuild.store.entries`); entries of the earlier layout are the envelope
itself, under ``/ac/<key>``. The envelope is UTF-8 canonical JSON
(:func:`ptebuild.canonical.canonical_bytes`: ``sort_keys``, separators ``,`` and ``:``, no
trailing newline), at most 4 MiB::

    {"document": {...},                 # ptebuild.results.ActionResult.to_json()
     "format": "ptebuild-remote-action",
     "key": "<key>",                    # the key it is stored under (checked on read)
     "refs": ["<sha256>", ...],         # the blobs the document needs, all uploaded before it
     "signature": "hmac-sha256:<64 hex>",   # only when written with a secret
     "version": 1}

``signature`` is HMAC-SHA-256, keyed by the shared secret, of the canonical JSON of the entry
without its ``signature`` member: it covers the key and the refs too, so a signed entry cannot
be replayed under another key. A reader given a secret refuses (a miss and one warning) an
unsigned or mis-signed entry; a reader without a secret ignores signatures.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

from ptebuild.canonical import canonical_bytes
from ptebuild.hashing import is_digest

ENTRY_FORMAT = "ptebuild-remote-action"
ENTRY_VERSION = 1
SIGNATURE_PREFIX = "hmac-sha256:"
MAX_ENTRY_BYTES = 4 << 20


def sign(entry: Mapping[str, Any], secret: bytes) -> str:
    """The ``signature`` member for ``entry`` (its other members): ``hmac-sha256:<hex>``."""
    body = {k: v for k, v in entry.items() if k != "signature"}
    return SIGNATURE_PREFIX + hmac.new(secret, canonical_bytes(body), hashlib.sha256).hexdigest()


def seal(key: str, document: dict[str, Any], refs: list[str], secret: bytes | None) -> bytes:
    """The stored bytes of the entry for ``document`` under ``key`` (signed if ``secret``)."""
    entry: dict[str, Any] = {
        "document": document,
        "format": ENTRY_FORMAT,
        "key": key,
        "refs": refs,
        "version": ENTRY_VERSION,
    }
    if secret is not None:
        entry["signature"] = sign(entry, secret)
    return canonical_bytes(entry)


def open_entry(key: str, raw: bytes, secret: bytes | None) -> tuple[str, dict[str, Any] | None]:
    """``("", document)``, or ``(why it is refused, None)``.

    ``raw`` is the entry as read from ``/ac/<key>``; empty stands for a body larger than
    :data:`MAX_ENTRY_BYTES` (the reader stops there). With a ``secret``, an unsigned or
    mis-signed entry is refused; without one, signatures are ignored.
    """
    if not raw:
        return f"larger than {MAX_ENTRY_BYTES >> 20} MiB", None
    try:
        entry = json.loads(raw)
    except ValueError:
        return "not JSON", None
    if not isinstance(entry, dict) or entry.get("format") != ENTRY_FORMAT:
        return "not a ptebuild entry", None
    if entry.get("version") != ENTRY_VERSION:
        return f"entry version {entry.get('version')!r}, expected {ENTRY_VERSION}", None
    if entry.get("key") != key:
        return "stored under another key than its own", None
    document, refs = entry.get("document"), entry.get("refs")
    if not isinstance(document, dict) or not isinstance(refs, list) or not all(is_digest(r) for r in refs):
        return "malformed document or refs", None
    if secret is not None:
        signature = entry.get("signature")
        if not isinstance(signature, str):
            return "unsigned (a secret is set)", None
        if not hmac.compare_digest(signature, sign(entry, secret)):
            return "wrong signature", None
    return "", document
