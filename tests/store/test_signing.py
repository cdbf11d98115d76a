"""Signed remote entries (ptebuild.store.signing), written and read through the HTTP tier on nginx."""

from __future__ import annotations

import json

import pytest
from http_helpers import KEY, OTHER_KEY, blob, document, entry_path, store_entry, stored_entry, tier

from ptebuild.canonical import canonical_bytes
from ptebuild.store import reapi
from ptebuild.store.signing import sign


def test_signed_entries(space, tmp_path):
    src, digest = blob(tmp_path, "a.bin", 100)
    doc = document(KEY, [digest], [100])
    signer = tier(space.url, secret=b"s3cret")
    signer.blobs.put_file(src, digest)
    signer.actions.put(KEY, doc, [digest])
    entry = json.loads(stored_entry(space.dir, KEY)[1])
    assert entry["signature"].startswith("hmac-sha256:") and entry["signature"] == sign(entry, b"s3cret")

    assert tier(space.url, secret=b"s3cret").actions.get(KEY) == doc
    assert tier(space.url).actions.get(KEY) == doc  # no secret: signatures are not checked

    warnings: list[str] = []
    wrong = tier(space.url, warnings, secret=b"another")
    assert wrong.actions.get(KEY) is None
    assert warnings == [f"remote cache {space.url}: entry {KEY}: wrong signature; refused"]
    assert wrong.stats()["refused"] == 1 and wrong.stats()["hits"] == 0


def _write(layout: str, folder, key: str, envelope: bytes, digest: str) -> None:
    """An entry written by hand: as an ActionResult naming the envelope, or (the earlier layout)
    the envelope itself under /ac/<key>."""
    if layout == "reapi":
        store_entry(folder, key, envelope, [reapi.OutputFile("f0.pte", reapi.Digest(digest, 100))])
    else:
        (folder / "ac").mkdir(exist_ok=True)
        (folder / "ac" / key).write_bytes(envelope)


@pytest.mark.parametrize("layout", ["reapi", "json"])
def test_unsigned_tampered_and_replayed_entries_are_refused(space, tmp_path, layout):
    src, digest = blob(tmp_path, "a.bin", 100)
    tier(space.url).blobs.put_file(src, digest)
    tier(space.url).actions.put(OTHER_KEY, document(OTHER_KEY, [digest], [100]), [digest])  # unsigned
    tier(space.url, secret=b"k").actions.put(KEY, document(KEY, [digest], [100]), [digest])
    unsigned, signed = stored_entry(space.dir, OTHER_KEY)[1], stored_entry(space.dir, KEY)[1]
    if layout == "json":
        _write(layout, space.dir, OTHER_KEY, unsigned, digest)
    tampered = json.loads(signed)
    tampered["document"]["target"] = "evil"
    _write(layout, space.dir, "1" * 32, canonical_bytes({**tampered, "key": "1" * 32}), digest)
    _write(layout, space.dir, "2" * 32, signed, digest)  # a signed entry copied to another key
    _write(layout, space.dir, "3" * 32, b"garbage", digest)
    if layout == "reapi":
        (space.dir / entry_path("4" * 32)).write_bytes(b"\x00garbage")

    warnings: list[str] = []
    reader = tier(space.url, warnings, secret=b"k")
    assert reader.actions.get(KEY) is not None
    for key in (OTHER_KEY, "1" * 32, "2" * 32, "3" * 32, "4" * 32):
        assert reader.actions.get(key) is None
    assert [w.split(": ", 2)[2] for w in warnings] == [
        "unsigned (a secret is set); refused",
        "wrong signature; refused",
        "stored under another key than its own; refused",
        "not JSON; refused",
    ] + (["not an ActionResult (ActionResult: field number 0 at offset 0); refused"] if layout == "reapi" else [])


def test_an_actionresult_naming_other_files_than_its_signed_envelope_is_refused(space, tmp_path):
    """The signature covers the envelope; the ActionResult around it may name nothing else."""
    src, digest = blob(tmp_path, "a.bin", 100)
    other, other_digest = blob(tmp_path, "b.bin", 100)
    signer = tier(space.url, secret=b"k")
    signer.blobs.put_file(src, digest)
    signer.blobs.put_file(other, other_digest)
    signer.actions.put(KEY, document(KEY, [digest], [100]), [digest])
    envelope = stored_entry(space.dir, KEY)[1]
    store_entry(space.dir, KEY, envelope, [reapi.OutputFile("f0.pte", reapi.Digest(other_digest, 100))])
    warnings: list[str] = []
    assert tier(space.url, warnings, secret=b"k").actions.get(KEY) is None
    assert warnings == [f"remote cache {space.url}: entry {KEY}: its ActionResult names other files than its "
                        "entry document; refused"]
