"""The HTTP tier (ptebuild.store.http) against a real nginx: blobs and entries, verified and streamed."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap

import pytest
from http_helpers import KEY, OTHER_KEY, blob, document, entry_path, leftovers, stored_entry, tier

from ptebuild.canonical import canonical_bytes
from ptebuild.errors import CorruptObject
from ptebuild.store import reapi, tiers
from ptebuild.store.http import HttpTier

# --- round trips -----------------------------------------------------------------------------


def test_registered_as_the_http_tier(space):
    t = tiers.open_tier("http", space.url)
    assert isinstance(t, HttpTier) and isinstance(t, tiers.Tier)
    assert isinstance(t.blobs, tiers.BlobStore) and isinstance(t.actions, tiers.ActionStore)
    assert (t.name, t.source, t.writable) == (f"remote cache {space.url}", "remote", True)
    t.close()


def test_blob_round_trip(space, tmp_path):
    src, digest = blob(tmp_path, "a.bin", 300_000)
    t = tier(space.url)
    assert not t.blobs.has(digest)
    assert t.blobs.put_file(src) == (digest, 300_000)
    assert space.files() == [f"cas/{digest}"]
    assert (space.dir / "cas" / digest).read_bytes() == src.read_bytes()
    assert t.blobs.has(digest)
    assert t.blobs.fetch(digest, tmp_path / "b.bin")
    assert (tmp_path / "b.bin").read_bytes() == src.read_bytes()
    s = t.stats()
    assert (s["uploads"], s["downloads"], s["errors"]) == (1, 1, 0)
    assert s["bytes_up"] == s["bytes_down"] == 300_000
    assert leftovers(tmp_path) == []


def test_fetch_of_an_absent_blob_is_false_and_writes_nothing(space, tmp_path):
    t = tier(space.url)
    assert t.blobs.fetch("ab" * 32, tmp_path / "x") is False
    assert list(tmp_path.iterdir()) == []
    assert t.stats()["errors"] == 0


def test_put_file_with_a_given_digest_and_an_empty_blob(space, tmp_path):
    src, digest = blob(tmp_path, "e.bin", 0)
    t = tier(space.url)
    assert t.blobs.put_file(src, digest) == (digest, 0)
    assert t.blobs.fetch(digest, tmp_path / "e2.bin") and (tmp_path / "e2.bin").read_bytes() == b""


def test_action_round_trip_and_wire_format(space, tmp_path):
    src, digest = blob(tmp_path, "a.bin", 1000)
    t = tier(space.url)
    assert t.actions.get(KEY) is None
    t.blobs.put_file(src, digest)
    doc = document(KEY, [digest], [1000])
    t.actions.put(KEY, doc, [digest])
    assert t.actions.get(KEY) == doc
    # /ac/<sha256 of "ptebuild action <key>">: an ActionResult naming the output and the envelope.
    envelope = canonical_bytes({"document": doc, "format": "ptebuild-remote-action", "key": KEY, "refs": [digest],
                                "version": 1})
    assert entry_path(KEY) == "ac/" + hashlib.sha256(b"ptebuild action " + KEY.encode()).hexdigest()
    result, stored = stored_entry(space.dir, KEY)
    assert stored == envelope
    assert result == reapi.ActionResult((reapi.OutputFile("f0.pte", reapi.Digest(digest, 1000)),
                                         reapi.OutputFile(".ptebuild/entry.json", reapi.Digest.of(envelope))))
    assert sorted(space.files()) == sorted([f"cas/{digest}", f"cas/{hashlib.sha256(envelope).hexdigest()}", entry_path(KEY)])
    assert (t.stats()["hits"], t.stats()["misses"]) == (1, 1)


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


def test_fetch_many_and_put_many_keep_order(space, tmp_path):
    items = [blob(tmp_path, f"s{i}.bin", 10_000 * (i + 1)) for i in range(6)]
    t = tier(space.url, jobs=4)
    assert t.blobs.put_many([(p, d) for p, d in items]) == [(d, p.stat().st_size) for p, d in items]
    out = tmp_path / "out"
    out.mkdir()
    wanted = [(d, out / p.name) for p, d in items] + [("cd" * 32, out / "absent")]
    assert t.blobs.fetch_many(wanted) == [True] * 6 + [False]
    for p, _ in items:
        assert (out / p.name).read_bytes() == p.read_bytes()
    assert not (out / "absent").exists()


def test_entry_naming_a_blob_the_server_lacks_is_not_uploaded(space, tmp_path):
    warnings: list[str] = []
    t = tier(space.url, warnings)
    t.actions.put(KEY, document(KEY, ["ee" * 32]), ["ee" * 32])
    assert space.files() == []
    assert warnings == [f"remote cache {space.url}: entry {KEY} not uploaded: blob eeeeeeeeeeee is not on the server"]


def test_upload_no_writes_nothing(space, tmp_path):
    src, digest = blob(tmp_path, "a.bin", 5000)
    writer = tier(space.url)
    writer.blobs.put_file(src, digest)
    writer.actions.put(KEY, document(KEY, [digest]), [digest])
    before = space.files()
    reader = tier(space.url, upload=False)
    assert reader.writable is False
    other, other_digest = blob(tmp_path, "b.bin", 7000)
    assert reader.blobs.put_file(other) == (other_digest, 7000)
    assert reader.blobs.put_many([(other, other_digest), (src, None)]) == [(other_digest, 7000), (digest, 5000)]
    reader.actions.put(OTHER_KEY, document(OTHER_KEY, [other_digest]), [other_digest])
    assert reader.actions.get(KEY) == document(KEY, [digest])
    assert space.files() == before
    _, envelope = stored_entry(space.dir, KEY)
    assert [line for line in space.requests() if line.startswith("PUT")] == [
        f"PUT /{space.prefix}/cas/{digest} 201 0",
        f"PUT /{space.prefix}/cas/{hashlib.sha256(envelope).hexdigest()} 201 0",
        f"PUT /{space.prefix}/{entry_path(KEY)} 201 0",
    ]
    assert reader.stats()["uploads"] == reader.stats()["bytes_up"] == 0


# --- verified downloads, entries held back ---------------------------------------------------


def test_a_flipped_byte_is_corrupt_and_never_written(space, proxy, tmp_path):
    src, digest = blob(tmp_path, "a.bin", 1_000_000)
    tier(space.url).blobs.put_file(src, digest)
    warnings: list[str] = []
    t = tier(f"{proxy.origin}/{space.prefix}", warnings)
    proxy.fault("flip", match="/cas/")
    dest = tmp_path / "out" / "b.bin"
    dest.parent.mkdir()
    with pytest.raises(CorruptObject) as err:
        t.blobs.fetch(digest, dest)
    assert str(err.value).startswith(f"blob {digest[:12]} has wrong bytes (1000000 bytes hashing to ")
    assert list(dest.parent.iterdir()) == [] and warnings == []
    assert t.stats()["errors"] == 1
    proxy.reset()  # the tier is still usable for other blobs
    assert t.blobs.fetch(digest, dest) and dest.read_bytes() == src.read_bytes()


def test_a_body_truncated_on_every_try_is_corrupt_without_a_warning(space, proxy, tmp_path):
    src, digest = blob(tmp_path, "a.bin", 1_000_000)
    tier(space.url).blobs.put_file(src, digest)
    warnings: list[str] = []
    t = tier(f"{proxy.origin}/{space.prefix}", warnings, max_failures=10)
    proxy.fault("truncate", match="/cas/")
    with pytest.raises(CorruptObject, match=r"^blob [0-9a-f]{12} did not arrive whole in 3 tries \(last: body truncated \(connection closed early\)\)$"):
        t.blobs.fetch(digest, tmp_path / "b.bin")
    assert not (tmp_path / "b.bin").exists() and leftovers(tmp_path) == []
    assert warnings == [] and t.stats()["errors"] == 3  # the exception is the one report


def test_failed_blob_upload_keeps_its_entry_back(space, proxy, tmp_path):
    src, digest = blob(tmp_path, "a.bin", 1000)
    warnings: list[str] = []
    t = tier(f"{proxy.origin}/{space.prefix}", warnings, retries=1, max_failures=10)
    proxy.fault("status", code=413, match="/cas/", methods=["PUT"])
    assert t.blobs.put_file(src, digest) == (digest, 1000)
    t.actions.put(KEY, document(KEY, [digest]), [digest])
    assert space.files() == []
    assert [w.split(": ", 1)[1] for w in warnings] == [
        f"PUT cas/{digest}: HTTP 413 Request Entity Too Large; not uploaded",
        f"entry {KEY} not uploaded: blob {digest[:12]} is not on the server",
    ]


# --- streaming -------------------------------------------------------------------------------

STREAM_SCRIPT = textwrap.dedent(
    """
    import resource, sys
    from pathlib import Path
    from ptebuild.store.http import HttpTier
    url, src, dest, digest = sys.argv[1:]
    t = HttpTier(url)
    t.blobs.has(digest)  # warm: imports, session, connection
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert t.blobs.put_file(Path(src), digest)[0] == digest
    assert t.blobs.fetch(digest, Path(dest))
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)
    """
)


def test_a_64_mib_blob_is_streamed_both_ways(space, tmp_path):
    src = tmp_path / "big.bin"
    h = hashlib.sha256()
    with open(src, "wb") as f:
        for _ in range(64):
            chunk = os.urandom(1 << 20)
            h.update(chunk)
            f.write(chunk)
    digest = h.hexdigest()
    dest = tmp_path / "back.bin"
    proc = subprocess.run(
        [sys.executable, "-c", STREAM_SCRIPT, space.url, str(src), str(dest), digest],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    growth = int(proc.stdout.strip())
    print(f"peak RSS growth: {growth / 2**20:.1f} MiB")
    assert growth < 16 << 20, f"peak RSS grew by {growth >> 20} MiB for a 64 MiB blob"
    assert dest.stat().st_size == 64 << 20
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == digest
