"""The remote tiers' one contract (ptebuild.store.remote), run against both servers: nginx for the
HTTP tier, BuildGrid for the gRPC tier, each behind its fault-injecting proxy where a test arms
faults. What only one protocol does (its wire format, its URLs, its own faults) is tested in
``test_http.py`` and ``test_grpc.py``."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from helpers import require_module
from http_helpers import blob, document, grpc_tier, leftovers, stored_entry, tier

from ptebuild.errors import CorruptObject, UsageError
from ptebuild.store import tiers
from ptebuild.store.remote import RemoteTier

LARGE = 5_000_000
"""Over BuildGrid's max batch size (4193280 bytes): sent and read by ByteStream."""


def unique_key() -> str:
    return os.urandom(16).hex()


class Remote:
    """One protocol's server for a test: ``url`` reaches it directly; :meth:`proxied` gives a tier
    through its fault proxy (``proxy``, started on first use)."""

    def __init__(self, kind: str, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        self._request = request
        self.proxy: Any = None
        if kind == "http":
            self.space = request.getfixturevalue("space")
            self.url = self.space.url
        else:
            require_module("grpc", "pip install 'ptebuild[grpc]' (./bootstrap.sh --test installs it)")
            self.url = request.getfixturevalue("buildgrid").url

    @property
    def tier_class(self) -> type:
        from ptebuild.store.grpc import GrpcTier
        from ptebuild.store.http import HttpTier

        return HttpTier if self.kind == "http" else GrpcTier

    @property
    def reuploads(self) -> bool:
        """The HTTP tier PUTs a blob the server has (which repairs a damaged one); a REAPI server
        checks every upload's hash, so the gRPC tier asks FindMissingBlobs and sends what it lacks."""
        return self.kind == "http"

    def tier(self, warnings: list[str] | None = None, url: str | None = None, **kwargs: Any) -> RemoteTier:
        """A tier with short timeouts (``http_helpers``) on ``url`` (default: the server)."""
        return (tier if self.kind == "http" else grpc_tier)(url or self.url, warnings, **kwargs)

    def proxied(self, warnings: list[str] | None = None, **kwargs: Any) -> RemoteTier:
        """A tier through the fault proxy, now ``self.proxy``."""
        if self.kind == "http":
            self.proxy = self._request.getfixturevalue("proxy")
            return self.tier(warnings, f"{self.proxy.origin}/{self.space.prefix}", **kwargs)
        self.proxy = self._request.getfixturevalue("grpc_proxy")
        return self.tier(warnings, self.proxy.url, **kwargs)


@pytest.fixture(params=["http", "grpc"])
def remote(request: pytest.FixtureRequest) -> Remote:
    return Remote(request.param, request)


# --- the tier ----------------------------------------------------------------------------------


def test_registered_as_its_tier_kind_and_picked_by_the_url_scheme(remote):
    t = tiers.open_tier(remote.kind, remote.url)
    assert isinstance(t, remote.tier_class) and isinstance(t, RemoteTier) and isinstance(t, tiers.Tier)
    assert isinstance(t.blobs, tiers.BlobStore) and isinstance(t.actions, tiers.ActionStore)
    assert (t.name, t.source, t.writable) == (f"remote cache {remote.url}", "remote", True)
    t.close()
    assert tiers.remote_kind(remote.url) == remote.kind
    opened = tiers.open_remote(tiers.RemoteSettings.of(remote.url, {"X-Token": "tok-1"}), print)
    assert isinstance(opened, remote.tier_class)
    opened.close()


def test_url_schemes_pick_the_tier_kind():
    assert [tiers.remote_kind(u) for u in ("http://h", "https://h/p", "grpc://h:1", "grpcs://h", "GRPC://h:1")] == [
        "http", "http", "grpc", "grpc", "grpc"]
    with pytest.raises(UsageError, match=r"^--remote-cache: 'ftp://h/x' is not a URL of a remote cache; "
                                         r"give http://, https://, grpc://, grpcs://host\[:port\]\.\.\.$"):
        tiers.remote_kind("ftp://user:pw@h/x")
    assert repr(tiers.RemoteSettings.of("grpc://u:p@h:1", {"X-Token": "tok-1"}, secret=b"k")) == (
        "RemoteSettings('grpc://h:1', headers=[X-Token], upload=True, signed=True)")


# --- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize(("remote", "size"), [("http", 300_000), ("grpc", 0), ("grpc", 1000), ("grpc", LARGE)],
                         ids=["http", "grpc-empty", "grpc-batched", "grpc-bytestream"], indirect=["remote"])
def test_blob_round_trip(remote, tmp_path, size):
    src, digest = blob(tmp_path, "a.bin", size)
    t = remote.tier()
    assert t.blobs.has(digest, size) is (size == 0)  # a REAPI server always has the empty blob
    assert t.blobs.put_file(src) == (digest, size)
    if remote.kind == "http":
        assert remote.space.files() == [f"cas/{digest}"]
        assert (remote.space.dir / "cas" / digest).read_bytes() == src.read_bytes()
    assert t.blobs.has(digest, size)
    assert t.blobs.fetch(digest, tmp_path / "b.bin", size)
    assert (tmp_path / "b.bin").read_bytes() == src.read_bytes()
    s = t.stats()
    assert (s["uploads"], s["downloads"], s["errors"]) == ((0, 0, 0) if size == 0 else (1, 1, 0))
    assert s["bytes_up"] == s["bytes_down"] == size
    assert leftovers(tmp_path) == []
    t.close()


def test_fetch_of_an_absent_blob_is_false_and_writes_nothing(remote, tmp_path):
    t = remote.tier()
    assert t.blobs.fetch("ab" * 32, tmp_path / "x", 10) is False
    assert t.blobs.fetch("cd" * 32, tmp_path / "y", LARGE) is False
    assert list(tmp_path.iterdir()) == [] and t.stats()["errors"] == 0


@pytest.mark.parametrize(("remote", "sizes"), [
    ("http", [10_000 * (i + 1) for i in range(6)]),
    ("grpc", [100_000 * (i + 1) for i in range(6)] + [LARGE]),
], ids=["http", "grpc"], indirect=["remote"])
def test_fetch_many_and_put_many_keep_order(remote, tmp_path, sizes):
    items = [blob(tmp_path, f"s{i}.bin", size) for i, size in enumerate(sizes)]
    t = remote.tier(jobs=4)
    assert t.blobs.put_many([(p, d) for p, d in items]) == [(d, p.stat().st_size) for p, d in items]
    assert t.stats()["uploads"] == len(items)
    assert t.blobs.put_many([(p, d) for p, d in items])  # all there: gRPC sends nothing again
    assert t.stats()["uploads"] == len(items) * (2 if remote.reuploads else 1)
    out = tmp_path / "out"
    out.mkdir()
    wanted = [(d, out / p.name, p.stat().st_size) for p, d in items] + [("cd" * 32, out / "absent", 5)]
    assert t.blobs.fetch_many(wanted) == [True] * len(items) + [False]
    for p, _ in items:
        assert (out / p.name).read_bytes() == p.read_bytes()
    assert not (out / "absent").exists() and leftovers(out) == []


def test_action_round_trip(remote, tmp_path):
    key = unique_key()
    src, digest = blob(tmp_path, "a.bin", 1000)
    t = remote.tier()
    assert t.actions.get(key) is None
    t.blobs.put_file(src, digest)
    doc = document(key, [digest], [1000])
    t.actions.put(key, doc, [digest])
    assert remote.tier().actions.get(key) == doc
    assert t.actions.get(key) == doc
    s = t.stats()
    assert (s["hits"], s["misses"], s["uploads"]) == (1, 1, 2)  # the blob, the entry (its envelope is part of it)


def test_entry_naming_a_blob_the_server_lacks_is_not_uploaded(remote):
    key = unique_key()
    warnings: list[str] = []
    t = remote.tier(warnings)
    t.actions.put(key, document(key, ["ee" * 32], [10]), ["ee" * 32])
    assert remote.tier().actions.get(key) is None
    if remote.kind == "http":
        assert remote.space.files() == []
    assert warnings == [f"remote cache {remote.url}: entry {key} not uploaded: blob eeeeeeeeeeee is not on the server"]


def test_upload_no_writes_nothing(remote, tmp_path):
    key, other_key = unique_key(), unique_key()
    src, digest = blob(tmp_path, "a.bin", 5000)
    writer = remote.tier()
    writer.blobs.put_file(src, digest)
    writer.actions.put(key, document(key, [digest], [5000]), [digest])
    before = remote.space.files() if remote.kind == "http" else None
    reader = remote.tier(upload=False)
    assert reader.writable is False
    other, other_digest = blob(tmp_path, "b.bin", 7000)
    assert reader.blobs.put_file(other) == (other_digest, 7000)
    assert reader.blobs.put_many([(other, other_digest), (src, None)]) == [(other_digest, 7000), (digest, 5000)]
    reader.actions.put(other_key, document(other_key, [other_digest], [7000]), [other_digest])
    assert reader.actions.get(key) == document(key, [digest], [5000])
    direct = remote.tier()
    assert not direct.blobs.has(other_digest, 7000) and direct.actions.get(other_key) is None
    if remote.kind == "http":
        space = remote.space
        assert space.files() == before
        _, envelope = stored_entry(space.dir, key)
        assert [line for line in space.requests() if line.startswith("PUT")] == [
            f"PUT /{space.prefix}/cas/{digest} 201 0",
            f"PUT /{space.prefix}/cas/{hashlib.sha256(envelope).hexdigest()} 201 0",
            f"PUT /{space.prefix}/ac/{hashlib.sha256(b'ptebuild action ' + key.encode()).hexdigest()} 201 0",
        ]
    assert reader.stats()["uploads"] == reader.stats()["bytes_up"] == 0


# --- verified downloads, entries held back ----------------------------------------------------


@pytest.mark.parametrize(("remote", "size", "match"), [
    ("http", 1_000_000, "/cas/"), ("grpc", 1_000_000, "BatchReadBlobs"), ("grpc", LARGE, "ByteStream/Read"),
], ids=["http", "grpc-batched", "grpc-bytestream"], indirect=["remote"])
def test_a_flipped_byte_is_corrupt_and_never_written(remote, tmp_path, size, match):
    src, digest = blob(tmp_path, "a.bin", size)
    remote.tier().blobs.put_file(src, digest)
    warnings: list[str] = []
    t = remote.proxied(warnings)
    remote.proxy.fault("flip", match=match)
    dest = tmp_path / "out" / "b.bin"
    dest.parent.mkdir()
    with pytest.raises(CorruptObject) as err:
        t.blobs.fetch(digest, dest, size)
    assert str(err.value).startswith(f"blob {digest[:12]} has wrong bytes ({size} bytes hashing to ")
    assert list(dest.parent.iterdir()) == [] and warnings == []
    assert t.stats()["errors"] == 1
    remote.proxy.reset()  # the tier is still usable
    assert t.blobs.fetch(digest, dest, size) and dest.read_bytes() == src.read_bytes()


@pytest.mark.parametrize(("remote", "size", "match", "why"), [
    ("http", 1_000_000, "/cas/", "body truncated (connection closed early)"),
    ("grpc", LARGE, "ByteStream/Read", "server unavailable (gRPC UNAVAILABLE)"),
], ids=["http", "grpc"], indirect=["remote"])
def test_a_download_cut_on_every_try_is_corrupt_without_a_warning(remote, tmp_path, size, match, why):
    src, digest = blob(tmp_path, "a.bin", size)
    remote.tier().blobs.put_file(src, digest)
    warnings: list[str] = []
    t = remote.proxied(warnings, max_failures=10)
    remote.proxy.fault("truncate", match=match)
    with pytest.raises(CorruptObject, match=rf"^blob {digest[:12]} did not arrive whole in 3 tries \(last: {re.escape(why)}\)$"):
        t.blobs.fetch(digest, tmp_path / "b.bin", size)
    assert not (tmp_path / "b.bin").exists() and leftovers(tmp_path) == []
    assert warnings == [] and t.stats()["errors"] == 3  # the exception is the one report


@pytest.mark.parametrize(("remote", "size", "fault", "tuning", "first"), [
    ("http", 1000, {"mode": "status", "code": 413, "match": "/cas/", "methods": ["PUT"]}, {"retries": 1},
     "PUT cas/{digest}: HTTP 413 Request Entity Too Large; not uploaded"),
    ("grpc", 1000, {"mode": "flip_request", "match": "BatchUpdateBlobs"}, {},
     "BatchUpdateBlobs {digest}: gRPC INVALID_ARGUMENT; not uploaded"),
    ("grpc", LARGE, {"mode": "flip_request", "match": "ByteStream/Write"}, {},
     "ByteStream.Write blobs/{digest}/{size}: gRPC INVALID_ARGUMENT; not uploaded"),
], ids=["http-refused", "grpc-batched-corrupted", "grpc-bytestream-corrupted"], indirect=["remote"])
def test_a_failed_blob_upload_keeps_its_entry_back(remote, tmp_path, size, fault, tuning, first):
    key = unique_key()
    src, digest = blob(tmp_path, "a.bin", size)
    warnings: list[str] = []
    t = remote.proxied(warnings, max_failures=10, **tuning)
    remote.proxy.fault(**fault)
    assert t.blobs.put_file(src, digest) == (digest, size)
    t.actions.put(key, document(key, [digest], [size]), [digest])
    if remote.kind == "http":
        assert remote.space.files() == []
    direct = remote.tier()
    assert not direct.blobs.has(digest, size) and direct.actions.get(key) is None
    assert [w.split(": ", 1)[1] for w in warnings] == [
        first.format(digest=digest, size=size),
        f"entry {key} not uploaded: blob {digest[:12]} is not on the server",
    ]


# --- streaming ---------------------------------------------------------------------------------

STREAM_SCRIPT = textwrap.dedent(
    """
    import resource, sys
    from pathlib import Path
    from ptebuild.store.tiers import open_tier
    kind, url, src, dest, digest, size = sys.argv[1:]
    t = open_tier(kind, url)
    t.blobs.has(digest, int(size))  # warm: imports, session or channel, capabilities
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert t.blobs.put_file(Path(src), digest)[0] == digest
    assert t.blobs.fetch(digest, Path(dest), int(size))
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)
    """
)


@pytest.mark.parametrize(("remote", "limit"), [("http", 16 << 20), ("grpc", 24 << 20)], ids=["http", "grpc"],
                         indirect=["remote"])
def test_a_64_mib_blob_is_streamed_both_ways(remote, tmp_path, limit):
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
        [sys.executable, "-c", STREAM_SCRIPT, remote.kind, remote.url, str(src), str(dest), digest, str(64 << 20)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    growth = int(proc.stdout.strip())
    print(f"peak RSS growth: {growth / 2**20:.1f} MiB")
    assert growth < limit, f"peak RSS grew by {growth >> 20} MiB for a 64 MiB blob"
    assert dest.stat().st_size == 64 << 20
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == digest
