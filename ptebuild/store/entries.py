"""The remote action entry as Bazel's cache servers store one: a REAPI ``ActionResult``.

Both remote tiers (:mod:`.http`, :mod:`.grpc`) store an action's entry this way, so that a server
that checks what it is given (bazel-remote validates every ``/ac/`` upload by default; BuildGrid
and Buildbarn check that the blobs of a result are in their CAS) accepts it, and drops it when
it evicts one of its blobs: the entry then reads as a miss, never as a hit with a blob missing.

Layout
======

The entry of action key ``K`` (ptebuild's key: lowercase hex, 16-128 characters) is stored under
an action digest, 64 hex characters as a SHA-256 cache requires::

    action digest   Digest(sha256(b"ptebuild action " + K), len(b"ptebuild action " + K))
                    (HTTP: /ac/<its hash>; gRPC: GetActionResult / UpdateActionResult)
    ActionResult    output_files: one per output of the document, in its order:
                        {path: the output's file name, digest: {its SHA-256, its size}}
                    then {path: ".ptebuild/entry.json", digest: the entry document's blob}
                    (exit_code 0; no other field)
    entry document  a CAS blob: ptebuild's signed-or-plain JSON envelope of the result
                    (:mod:`.signing`: document, key, refs, signature), at most 4 MiB

The path ``.ptebuild/entry.json`` cannot be an output's (output names never start with ``.`` nor
hold ``/``). The blobs are uploaded first, then the entry document, then the ``ActionResult``.

Reading
=======

The ``ActionResult`` is decoded (other fields a server adds are skipped); its entry document is
fetched by digest (its SHA-256 checked, as every blob's) and opened as before (:func:`.signing.open_entry`:
format, key, signature). The result is refused unless its other output files are exactly the
document's outputs (path, hash and size): the signature covers the document, and the
``ActionResult`` may not name anything else. A document that is gone (evicted) is a miss.

Entries of the earlier layout (the envelope itself, under ``/ac/<K>`` of an HTTP cache) are read
by :func:`ptebuild.store.signing.open_entry` alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ptebuild.errors import CorruptObject, FormatError
from ptebuild.store import reapi
from ptebuild.store.faults import Budget
from ptebuild.store.signing import MAX_ENTRY_BYTES, open_entry, seal

ENTRY_PATH = ".ptebuild/entry.json"
"""The output path of the entry document in an entry's ``ActionResult``."""

_ACTION_PREFIX = b"ptebuild action "
_KEY_RE = re.compile(r"[0-9a-f]{16,128}")


def action_digest(key: str) -> reapi.Digest:
    """The REAPI action digest an entry of ``key`` is stored under; ValueError if ``key`` is not
    an action key."""
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise ValueError(f"not an action key (16-128 lowercase hex): {key!r}")
    return reapi.Digest.of(_ACTION_PREFIX + key.encode())


def accept(budget: Budget, key: str, opened: Callable[[], tuple[str, dict[str, Any] | None]]) -> dict[str, Any] | None:
    """What a tier's ``get`` answers for an entry it read, whatever carried it: the document
    ``opened()`` gives, counted as a hit; or None, counted as a miss, and as refused with one
    warning when ``opened`` names a problem (a corrupt envelope among them)."""
    try:
        problem, document = opened()
    except CorruptObject as exc:
        problem, document = f"its envelope: {exc}", None
    if document is None:
        budget.count("misses")
        if problem:
            budget.count("refused")
            budget.warn(f"entry {key}: {problem}; refused")
        return None
    budget.count("hits")
    return document


def may_upload(budget: Budget, key: str, envelope: bytes, missing: list[str]) -> bool:
    """Whether an entry may go up: not when a blob it names is not on the server (``missing``)
    or its envelope is larger than an entry may be (one warning each): an entry never names a
    missing blob."""
    if missing:
        budget.warn(f"entry {key} not uploaded: blob {missing[0][:12]} is not on the server")
        return False
    if len(envelope) > MAX_ENTRY_BYTES:
        budget.warn(f"entry {key} not uploaded: larger than {MAX_ENTRY_BYTES >> 20} MiB")
        return False
    return True


def outputs(document: dict[str, Any], refs: list[str]) -> tuple[reapi.OutputFile, ...]:
    """The output files of an action document (``ActionResult.to_json()``): one per output.

    Raises ValueError if an output is malformed or the outputs are not exactly the blobs of ``refs``.
    """
    found = files(document)
    if {f.digest.hash for f in found} != set(refs):
        raise ValueError("the refs of a remote entry must be the blobs of its document's outputs")
    return found


def files(document: dict[str, Any]) -> tuple[reapi.OutputFile, ...]:
    """The output files an action document names (ValueError if one is malformed)."""
    out = []
    for output in document.get("outputs") or ():
        if not isinstance(output, dict):
            raise ValueError(f"an action document's output is not a table: {output!r:.200}")
        name, sha256, size = output.get("name"), output.get("sha256"), output.get("bytes")
        if not isinstance(name, str) or not isinstance(sha256, str) or not isinstance(size, int):
            raise ValueError(f"an action document's output needs a name, a sha256 and a size: {output!r:.200}")
        out.append(reapi.OutputFile(name, reapi.Digest(sha256, size)))
    return tuple(out)


def pack(key: str, document: dict[str, Any], refs: list[str], secret: bytes | None) -> tuple[bytes, reapi.ActionResult]:
    """``(entry document bytes, ActionResult)``: what is uploaded for ``document`` under ``key``,
    the first as a CAS blob. Raises ValueError as :func:`outputs` does."""
    files = outputs(document, refs)
    envelope = seal(key, document, refs, secret)
    return envelope, reapi.ActionResult((*files, reapi.OutputFile(ENTRY_PATH, reapi.Digest.of(envelope))))


def decode(raw: bytes) -> tuple[str, reapi.ActionResult | None, reapi.Digest | None]:
    """``("", ActionResult, the entry document's digest)``, or ``(why it is refused, None, None)``."""
    try:
        result = reapi.ActionResult.decode(raw)
    except FormatError as exc:
        return f"not an ActionResult ({exc})", None, None
    entries = [f for f in result.output_files if f.path == ENTRY_PATH]
    if len(entries) != 1:
        return "an ActionResult without ptebuild's entry document", None, None
    digest = entries[0].digest
    if len(digest.hash) != 64 or digest.size > MAX_ENTRY_BYTES:
        return f"its entry document is not a SHA-256 blob of at most {MAX_ENTRY_BYTES >> 20} MiB", None, None
    return "", result, digest


def open_document(key: str, result: reapi.ActionResult, envelope: bytes, secret: bytes | None) -> tuple[str, dict[str, Any] | None]:
    """``("", document)``, or ``(why it is refused, None)``: the entry document's checks
    (:func:`~ptebuild.store.signing.open_entry`), then its outputs against the ``ActionResult``'s."""
    problem, document = open_entry(key, envelope, secret)
    if document is None:
        return problem, None
    try:
        expected = files(document)
    except ValueError:
        return "malformed document outputs", None
    named = [f for f in result.output_files if f.path != ENTRY_PATH]
    if sorted(_key(f) for f in named) != sorted(_key(f) for f in expected):
        return "its ActionResult names other files than its entry document", None
    return "", document


def read(key: str, raw: bytes, fetch: Callable[[reapi.Digest], bytes | None], secret: bytes | None) -> tuple[str, dict[str, Any] | None]:
    """The document of the entry ``raw`` read under ``key``: ``("", document)``; ``("", None)``
    when its entry document is gone (a miss); ``(why it is refused, None)``.

    ``fetch(digest)`` returns a blob's bytes, checked against the digest, or None if absent; its
    exceptions pass (a tier's CorruptObject, StoreError).
    """
    problem, result, digest = decode(raw)
    if result is None or digest is None:
        return problem, None
    envelope = fetch(digest)
    if envelope is None:
        return "", None
    if not envelope:
        return "its entry document is empty", None
    return open_document(key, result, envelope, secret)


def _key(f: reapi.OutputFile) -> tuple[str, str, int]:
    return f.path, f.digest.hash, f.digest.size
