"""Signed remote entries (ptebuild.store.signing), written and read through the HTTP tier on nginx."""

from __future__ import annotations

import json

from http_helpers import KEY, OTHER_KEY, blob, document, tier

from ptebuild.canonical import canonical_bytes
from ptebuild.store.signing import sign


def test_signed_entries(space, tmp_path):
    src, digest = blob(tmp_path, "a.bin", 100)
    doc = document(KEY, [digest])
    signer = tier(space.url, secret=b"s3cret")
    signer.blobs.put_file(src, digest)
    signer.actions.put(KEY, doc, [digest])
    entry = json.loads((space.dir / "ac" / KEY).read_bytes())
    assert entry["signature"].startswith("hmac-sha256:") and entry["signature"] == sign(entry, b"s3cret")

    assert tier(space.url, secret=b"s3cret").actions.get(KEY) == doc
    assert tier(space.url).actions.get(KEY) == doc  # no secret: signatures are not checked

    warnings: list[str] = []
    wrong = tier(space.url, warnings, secret=b"another")
    assert wrong.actions.get(KEY) is None
    assert warnings == [f"remote cache {space.url}: entry ac/{KEY}: wrong signature; refused"]
    assert wrong.stats()["refused"] == 1 and wrong.stats()["hits"] == 0


def test_unsigned_tampered_and_replayed_entries_are_refused(space, tmp_path):
    src, digest = blob(tmp_path, "a.bin", 100)
    tier(space.url).blobs.put_file(src, digest)
    tier(space.url).actions.put(OTHER_KEY, document(OTHER_KEY, [digest]), [digest])  # unsigned
    tier(space.url, secret=b"k").actions.put(KEY, document(KEY, [digest]), [digest])
    ac = space.dir / "ac"
    tampered = json.loads((ac / KEY).read_bytes())
    tampered["document"]["target"] = "evil"
    (ac / ("1" * 32)).write_bytes(canonical_bytes({**tampered, "key": "1" * 32}))
    (ac / ("2" * 32)).write_bytes((ac / KEY).read_bytes())  # a signed entry copied to another key
    (ac / ("3" * 32)).write_bytes(b"\x00garbage")

    warnings: list[str] = []
    reader = tier(space.url, warnings, secret=b"k")
    assert reader.actions.get(KEY) is not None
    for key in (OTHER_KEY, "1" * 32, "2" * 32, "3" * 32):
        assert reader.actions.get(key) is None
    assert [w.split(": ", 2)[2] for w in warnings] == [
        "unsigned (a secret is set); refused",
        "wrong signature; refused",
        "stored under another key than its own; refused",
        "not JSON; refused",
    ]
