"""The gRPC tier's blobs (ptebuild.store.grpc_blobs.GrpcBlobStore) against a real BuildGrid, the
calls watched through the gRPC proxy in front of it (``tests/remote/cache_fixtures.py``).

What it is held to: what travels. The empty blob is never sent nor asked for; an upload asks
FindMissingBlobs once and sends only what the server lacks; small blobs share batch requests
within the server's limit, large ones stream by ByteStream; a blob's size, which REAPI names it
by, is learned from what the build met; the refs of an entry are asked for only when not known;
an entry's envelope is read and written without counting as a blob; a read-only tier sends
nothing. The contract it shares with the HTTP tier (round trips, verified downloads, cut streams,
failed uploads holding an entry back): ``test_remote.py``.
"""

from __future__ import annotations

import collections
import os

import pytest
from helpers import require_module
from http_helpers import blob, grpc_tier, leftovers

from ptebuild.store.grpc_blobs import EMPTY
from ptebuild.store.reapi import Digest
from ptebuild.store.signing import MAX_ENTRY_BYTES

require_module("grpc", "pip install 'ptebuild[grpc]' (./bootstrap.sh --test installs it)")

SMALL = 1_500_000
"""Two of these fit one batch request under BuildGrid's limit (4193280 bytes), three do not."""
LARGE = 5_000_000
"""Over the batch limit: sent and read by ByteStream."""


def calls(proxy) -> collections.Counter[str]:
    """How many times the proxy saw each method, by its short name."""
    return collections.Counter(method.rsplit("/", 1)[1] for method, _, _ in proxy.log())


def test_the_empty_blob_is_never_sent_nor_asked_for(grpc_proxy, tmp_path):
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    t = grpc_tier(grpc_proxy.url)
    assert t.blobs.put_file(empty) == (EMPTY, 0)
    assert t.blobs.has(EMPTY, 0) and t.blobs.has(EMPTY)
    assert t.blobs.fetch(EMPTY, tmp_path / "back") and (tmp_path / "back").read_bytes() == b""
    assert t.blobs.refs_missing([Digest(EMPTY, 0)]) == []
    assert +calls(grpc_proxy) <= collections.Counter({"GetCapabilities": 1})  # whether uploads are on: nothing more
    assert t.blobs.fetch("ab" * 32, tmp_path / "zero", 0) is False  # no bytes cannot hash to another digest
    assert t.stats()["uploads"] == t.stats()["downloads"] == 0


def test_an_upload_sends_only_what_the_server_lacks(buildgrid, grpc_proxy, tmp_path):
    (there, d_there), (new, d_new) = blob(tmp_path, "there.bin", 1000), blob(tmp_path, "new.bin", 2000)
    grpc_tier(buildgrid.url).blobs.put_file(there, d_there)
    t = grpc_tier(grpc_proxy.url)
    assert t.blobs.put_many([(there, d_there), (new, None)]) == [(d_there, 1000), (d_new, 2000)]
    assert calls(grpc_proxy) == {"GetCapabilities": 1, "FindMissingBlobs": 1, "BatchUpdateBlobs": 1}
    assert (t.stats()["uploads"], t.stats()["bytes_up"]) == (1, 2000)
    t.blobs.put_many([(there, d_there), (new, d_new)])
    assert calls(grpc_proxy)["BatchUpdateBlobs"] == 1 and calls(grpc_proxy)["FindMissingBlobs"] == 2
    assert grpc_tier(buildgrid.url).blobs.has(d_new, 2000)


def test_small_blobs_share_batches_and_large_ones_stream(grpc_proxy, tmp_path):
    sizes = [1000] * 5 + [SMALL] * 3 + [LARGE]
    items = [blob(tmp_path, f"b{i}.bin", size) for i, size in enumerate(sizes)]
    t = grpc_tier(grpc_proxy.url, jobs=3)
    t.blobs.put_many(items)
    assert calls(grpc_proxy) == {"GetCapabilities": 1, "FindMissingBlobs": 1, "BatchUpdateBlobs": 2, "Write": 1}
    grpc_proxy.reset()
    out = tmp_path / "out"
    out.mkdir()
    reader = grpc_tier(grpc_proxy.url, jobs=3)
    assert reader.blobs.fetch_many([(d, out / p.name, p.stat().st_size) for p, d in items]) == [True] * len(items)
    assert calls(grpc_proxy) == {"GetCapabilities": 1, "BatchReadBlobs": 2, "Read": 1}
    for p, _ in items:
        assert (out / p.name).read_bytes() == p.read_bytes()
    assert reader.stats()["downloads"] == len(items) and leftovers(out) == []


def test_a_batch_answers_for_each_blob(buildgrid, grpc_proxy, tmp_path):
    """One BatchReadBlobs for a blob the server has and one it lacks: one written, one absent."""
    (there, d_there) = blob(tmp_path, "there.bin", 3000)
    grpc_tier(buildgrid.url).blobs.put_file(there, d_there)
    absent = Digest.of(os.urandom(3000))
    t = grpc_tier(grpc_proxy.url)
    found = t.blobs.fetch_many([(absent.hash, tmp_path / "a", 3000), (d_there, tmp_path / "b", 3000)])
    assert found == [False, True] and calls(grpc_proxy)["BatchReadBlobs"] == 1
    assert not (tmp_path / "a").exists() and (tmp_path / "b").read_bytes() == there.read_bytes()
    assert t.stats()["errors"] == 0


def test_a_size_is_learned_from_what_the_build_met(buildgrid, tmp_path):
    src, digest = blob(tmp_path, "a.bin", 700)
    grpc_tier(buildgrid.url).blobs.put_file(src, digest)
    t = grpc_tier(buildgrid.url)
    with pytest.raises(ValueError, match=f"^the gRPC tier needs the size of blob {digest}$"):
        t.blobs.has(digest)
    t.blobs.learn([Digest(digest, 700)])  # an entry read from the server names it
    assert t.blobs.has(digest) and t.blobs.fetch(digest, tmp_path / "b.bin")
    other, other_digest = blob(tmp_path, "c.bin", 900)
    t.blobs.put_file(other)  # a blob stored in this build
    assert t.blobs.fetch(other_digest, tmp_path / "d.bin") and (tmp_path / "d.bin").read_bytes() == other.read_bytes()


def test_refs_are_asked_for_only_when_not_known(buildgrid, grpc_proxy, tmp_path):
    """An entry's refs: uploaded in this build (known there), failed (known missing, not asked),
    the others asked in one call."""
    (up, d_up), (failed, d_failed) = blob(tmp_path, "up.bin", 100), blob(tmp_path, "failed.bin", 200)
    (elsewhere, d_elsewhere) = blob(tmp_path, "elsewhere.bin", 300)
    grpc_tier(buildgrid.url).blobs.put_file(elsewhere, d_elsewhere)
    warnings: list[str] = []
    t = grpc_tier(grpc_proxy.url, warnings, retries=0, max_failures=10)
    t.blobs.put_file(up, d_up)
    grpc_proxy.fault("status", code="INTERNAL", match="BatchUpdateBlobs")
    t.blobs.put_file(failed, d_failed)
    assert len(warnings) == 1 and warnings[0].endswith(f"BatchUpdateBlobs {d_failed}: gRPC INTERNAL; not uploaded")
    grpc_proxy.reset()
    never = Digest.of(os.urandom(400))
    refs = [Digest(d_up, 100), Digest(d_failed, 200), Digest(d_elsewhere, 300), never]
    assert t.blobs.refs_missing(refs) == [d_failed, never.hash]
    assert calls(grpc_proxy) == {"FindMissingBlobs": 1}
    assert t.blobs.refs_missing(refs[:3]) == [d_failed]  # the one found is known now: nothing asked
    assert calls(grpc_proxy) == {"FindMissingBlobs": 1}


def test_an_envelope_is_read_and_written_without_counting_as_a_blob(grpc_proxy, tmp_path):
    envelope = b'{"document": {}, "format": "ptebuild-remote-action"}' + os.urandom(64)
    t = grpc_tier(grpc_proxy.url)
    assert t.blobs.put_bytes(envelope)
    assert t.blobs.put_bytes(envelope)  # there already: not sent again
    assert t.blobs.read_bytes(Digest.of(envelope)) == envelope
    assert calls(grpc_proxy)["BatchUpdateBlobs"] == 1 and calls(grpc_proxy)["BatchReadBlobs"] == 1
    stats = t.stats()
    assert (stats["uploads"], stats["downloads"], stats["bytes_up"]) == (0, 0, len(envelope))
    grpc_proxy.reset()
    assert t.blobs.read_bytes(Digest.of(os.urandom(10))) is None  # absent
    assert t.blobs.read_bytes(Digest("ab" * 32, MAX_ENTRY_BYTES + 1)) is None  # too large for an entry: not asked
    assert t.blobs.read_bytes(Digest(EMPTY, 0)) == b"" and t.blobs.read_bytes(Digest("ab" * 32, 0)) is None
    assert calls(grpc_proxy) == {"BatchReadBlobs": 1}


def test_a_large_envelope_streams(grpc_proxy):
    envelope = os.urandom(MAX_ENTRY_BYTES - 1000)  # under the entry limit, over the batch limit
    t = grpc_tier(grpc_proxy.url)
    assert t.blobs.put_bytes(envelope)
    assert t.blobs.read_bytes(Digest.of(envelope)) == envelope
    assert calls(grpc_proxy) == {"GetCapabilities": 1, "FindMissingBlobs": 1, "Write": 1, "Read": 1}
    assert t.stats()["uploads"] == t.stats()["downloads"] == 0


def test_a_read_only_tier_sends_nothing(grpc_proxy, tmp_path):
    src, digest = blob(tmp_path, "a.bin", 1000)
    t = grpc_tier(grpc_proxy.url, upload=False)
    assert t.blobs.put_file(src) == (digest, 1000) and t.blobs.put_bytes(b"an envelope") is False
    assert not t.blobs.uploads_on() and not t.writable
    assert grpc_proxy.log() == []
