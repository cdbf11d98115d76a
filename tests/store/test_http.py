"""The HTTP tier (ptebuild.store.http) against a real nginx: what only it does (the entries of the
earlier layout, its wire format, an upload with a given digest). The contract it shares with the
gRPC tier, round trips, verified downloads, held-back entries and streaming: ``test_remote.py``."""

from __future__ import annotations

import hashlib

from http_helpers import KEY, blob, document, entry_path, stored_entry, tier

from ptebuild.canonical import canonical_bytes
from ptebuild.store import reapi

# --- round trips -----------------------------------------------------------------------------


def test_put_file_with_a_given_digest_and_an_empty_blob(space, tmp_path):
    src, digest = blob(tmp_path, "e.bin", 0)
    t = tier(space.url)
    assert t.blobs.put_file(src, digest) == (digest, 0)
    assert t.blobs.fetch(digest, tmp_path / "e2.bin") and (tmp_path / "e2.bin").read_bytes() == b""


def test_entry_wire_format(space, tmp_path):
    """What nginx holds of an entry: /ac/<sha256 of "ptebuild action <key>">, an ActionResult naming
    the output and the envelope, a blob of its own. (Round trips: test_remote.py.)"""
    src, digest = blob(tmp_path, "a.bin", 1000)
    t = tier(space.url)
    t.blobs.put_file(src, digest)
    doc = document(KEY, [digest], [1000])
    t.actions.put(KEY, doc, [digest])
    assert t.actions.get(KEY) == doc
    envelope = canonical_bytes({"document": doc, "format": "ptebuild-remote-action", "key": KEY, "refs": [digest],
                                "version": 1})
    assert entry_path(KEY) == "ac/" + hashlib.sha256(b"ptebuild action " + KEY.encode()).hexdigest()
    result, stored = stored_entry(space.dir, KEY)
    assert stored == envelope
    assert result == reapi.ActionResult((reapi.OutputFile("f0.pte", reapi.Digest(digest, 1000)),
                                         reapi.OutputFile(".ptebuild/entry.json", reapi.Digest.of(envelope))))
    assert sorted(space.files()) == sorted([f"cas/{digest}", f"cas/{hashlib.sha256(envelope).hexdigest()}", entry_path(KEY)])


def test_an_entry_of_the_earlier_layout_still_reads(space, tmp_path):
    """ptebuild's JSON envelope under /ac/<key>, as earlier versions wrote it."""
    from ptebuild.store.signing import seal

    src, digest = blob(tmp_path, "a.bin", 1000)
    t = tier(space.url)
    t.blobs.put_file(src, digest)
    doc = document(KEY, [digest], [1000])
    (space.dir / "ac").mkdir()
    (space.dir / "ac" / KEY).write_bytes(seal(KEY, doc, [digest], None))
    assert t.actions.get(KEY) == doc
    assert tier(space.url, secret=b"k").actions.get(KEY) is None  # unsigned: refused with a secret
    assert [line.split()[1] for line in space.requests() if line.startswith("GET")][:2] == [
        f"/{space.prefix}/{entry_path(KEY)}", f"/{space.prefix}/ac/{KEY}"]


def test_an_evicted_blob_is_a_miss_not_a_broken_hit(space, tmp_path):
    """A server evicts blobs on its own: an entry whose envelope or output is gone reads as a miss."""
    from ptebuild.results import ActionResult, OutputFile
    from ptebuild.store import Store, frontend, local

    src, digest = blob(tmp_path, "a.bin", 1000)
    result = ActionResult(key=KEY, target="p", kind="program", outputs=(OutputFile("p.pte", digest, 1000),))
    warnings: list[str] = []
    writer = tier(space.url, warnings)
    writer.blobs.put_file(src, digest)
    writer.actions.put(KEY, result.to_json(), [digest])
    (space.dir / "cas" / digest).unlink()  # the output evicted
    cache = frontend.Cache([local.LocalTier(Store(tmp_path / "cache")), tier(space.url, warnings)], warnings.append)
    assert cache.lookup(KEY).hit is None
    writer.blobs.put_file(src, digest)
    envelope = stored_entry(space.dir, KEY)[1]
    (space.dir / "cas" / hashlib.sha256(envelope).hexdigest()).unlink()  # the envelope evicted
    assert tier(space.url, warnings).actions.get(KEY) is None
    assert cache.lookup(KEY).hit is None
    assert warnings == []
    cache.close()
