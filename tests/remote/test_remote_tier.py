"""The remote cache tier (ptebuild.store.remote) against a real nginx, with faults from a real proxy."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
import traceback
from pathlib import Path

import pytest

from ptebuild.errors import CorruptObject, StoreError, UsageError
from ptebuild.store import tiers
from ptebuild.store.remote import HttpTier, canonical_json, headers_from, sign

TOKEN = "tok-5e3c7a91d2"
KEY = "0123456789abcdef" * 2
OTHER_KEY = "fedcba9876543210" * 2


def blob(tmp_path: Path, name: str, size: int) -> tuple[Path, str]:
    path = tmp_path / name
    data = os.urandom(size)
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def tier(url: str, warnings: list[str] | None = None, **kwargs) -> HttpTier:
    kwargs.setdefault("timeout", 2.0)
    kwargs.setdefault("backoff", 0.01)
    return HttpTier(url, warn=(warnings.append if warnings is not None else lambda s: None), **kwargs)


def document(key: str, digests: list[str]) -> dict:
    return {
        "format": "ptebuild-action",
        "version": 2,
        "key": key,
        "target": "policy_xnnpack",
        "kind": "program",
        "outputs": [{"name": f"f{i}.pte", "sha256": d, "bytes": 1} for i, d in enumerate(digests)],
    }


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".part"))


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
    doc = document(KEY, [digest])
    t.actions.put(KEY, doc, [digest])
    assert t.actions.get(KEY) == doc
    raw = (space.dir / "ac" / KEY).read_bytes()
    expected = {"document": doc, "format": "ptebuild-remote-action", "key": KEY, "refs": [digest], "version": 1}
    assert raw == canonical_json(expected)
    assert (t.stats()["hits"], t.stats()["misses"]) == (1, 1)


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
    assert warnings == [f"remote cache {space.url}: entry ac/{KEY} not uploaded: blob eeeeeeeeeeee is not on the server"]


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
    assert [line for line in space.requests() if line.startswith("PUT")] == [
        f"PUT /{space.prefix}/cas/{digest} 201 0",
        f"PUT /{space.prefix}/ac/{KEY} 201 0",
    ]
    assert reader.stats()["uploads"] == reader.stats()["bytes_up"] == 0


# --- signing ---------------------------------------------------------------------------------


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
    (ac / ("1" * 32)).write_bytes(canonical_json({**tampered, "key": "1" * 32}))
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


# --- faults ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "extra", "why"),
    [
        ("500", {}, "HTTP 500 Internal Server Error"),
        ("status", {"code": 503}, "HTTP 503 Service Unavailable"),
        ("slow", {"delay": 1.0}, "no answer within 0.4 s"),
        ("truncate", {}, "body truncated (connection closed early)"),
        ("reset", {}, "server closed the connection without answering"),
    ],
)
def test_a_transient_fault_is_retried_with_one_warning(space, proxy, tmp_path, mode, extra, why):
    src, digest = blob(tmp_path, "a.bin", 2_000_000)
    tier(space.url).blobs.put_file(src, digest)
    warnings: list[str] = []
    t = tier(f"{proxy.origin}/{space.prefix}", warnings, timeout=0.4)
    proxy.fault(mode, times=1, match="/cas/", methods=["GET"], **extra)
    assert t.blobs.fetch(digest, tmp_path / "b.bin")
    assert (tmp_path / "b.bin").read_bytes() == src.read_bytes()
    assert warnings == [
        f"remote cache {proxy.origin}/{space.prefix}: GET cas/{digest}: {why}; succeeded after 1 retry"
    ]
    assert t.stats()["errors"] == 1 and leftovers(tmp_path) == []


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


def test_server_down_switches_the_tier_off(closed_port, tmp_path):
    url = f"http://127.0.0.1:{closed_port}/cache"
    warnings: list[str] = []
    t = tier(url, warnings)
    t0 = time.monotonic()
    with pytest.raises(StoreError) as err:
        t.actions.get(KEY)
    assert str(err.value) == f"3 failed requests (last: GET ac/{KEY}: connection refused)"
    assert warnings == [] and t.disabled and t.stats()["disabled"] and t.stats()["errors"] == 3
    with pytest.raises(StoreError):  # later calls fail at once, without the network
        t.blobs.fetch("ab" * 32, tmp_path / "x")
    with pytest.raises(StoreError):
        t.blobs.put_file(blob(tmp_path, "a", 10)[0])
    assert time.monotonic() - t0 < 2


def test_repeated_500s_across_operations_switch_the_tier_off(space, proxy, tmp_path):
    warnings: list[str] = []
    t = tier(f"{proxy.origin}/{space.prefix}", warnings, retries=0)
    proxy.fault("500", match="/ac/")
    assert t.actions.get(KEY) is None
    assert t.actions.get(KEY) is None
    with pytest.raises(StoreError, match=r"3 failed requests \(last: GET ac/.*: HTTP 500 Internal Server Error\)"):
        t.actions.get(KEY)
    assert len(warnings) == 2 and all(w.endswith("HTTP 500 Internal Server Error; treated as a miss") for w in warnings)


def test_refused_mid_build_then_killed(space, proxy, tmp_path):
    files = [blob(tmp_path, f"b{i}.bin", 50_000) for i in range(8)]
    t = tier(f"{proxy.origin}/{space.prefix}", jobs=2)
    proxy.die_after(3)
    with pytest.raises(StoreError, match="connection refused|closed the connection"):
        t.blobs.put_many(files)
    stored = space.files()
    assert 0 < len(stored) <= 4
    for name in stored:  # what reached the server is whole
        digest = name.split("/")[1]
        assert hashlib.sha256((space.dir / name).read_bytes()).hexdigest() == digest


def test_refuse_mode_then_back(space, proxy, tmp_path):
    src, digest = blob(tmp_path, "a.bin", 1000)
    warnings: list[str] = []
    t = tier(f"{proxy.origin}/{space.prefix}", warnings, retries=0, max_failures=5)
    assert t.blobs.put_file(src, digest)  # opens a pooled connection
    proxy.fault("refuse")
    assert t.blobs.has(digest) is False
    assert warnings[-1].endswith(f"HEAD cas/{digest}: connection refused; treated as a miss")
    proxy.reset()
    assert t.blobs.has(digest) is True


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
        f"entry ac/{KEY} not uploaded: blob {digest[:12]} is not on the server",
    ]


def test_forbidden_upload_turns_uploads_off_and_forbidden_read_the_tier(space, proxy, tmp_path):
    src, digest = blob(tmp_path, "a.bin", 1000)
    warnings: list[str] = []
    t = tier(f"{proxy.origin}/{space.prefix}", warnings)
    proxy.fault("status", code=403, methods=["PUT"])
    t.blobs.put_file(src, digest)
    t.blobs.put_file(src, digest)
    assert t.writable is False and len(warnings) == 1 and warnings[0].endswith("uploads turned off for this build")
    assert t.actions.get(KEY) is None  # reads go on
    proxy.fault("status", code=401)
    with pytest.raises(StoreError, match=r"^GET ac/[0-9a-f]+: HTTP 401 Unauthorized \(check the credentials: --remote-cache-header\)$"):
        t.actions.get(KEY)


# --- credentials -----------------------------------------------------------------------------


def test_credentials_never_appear(space, proxy, tmp_path, closed_port):
    src, digest = blob(tmp_path, "a.bin", 1000)
    warnings: list[str] = []
    texts: list[str] = []
    url = f"http://user:pw-{TOKEN}@127.0.0.1:{proxy.port}/{space.prefix}"
    t = tier(url, warnings, headers={"Authorization": f"Bearer {TOKEN}", "X-Extra": TOKEN}, secret=TOKEN.encode(), retries=0, max_failures=4)
    t.blobs.put_file(src, digest)
    t.actions.put(KEY, document(KEY, [digest]), [digest])
    sent = proxy.log()[0][3]
    assert sent["Authorization"] == f"Bearer {TOKEN}" and sent["X-Extra"] == TOKEN  # really sent
    proxy.fault("500", times=1)
    t.actions.get(KEY)
    proxy.fault("flip", times=1)
    with pytest.raises(CorruptObject) as corrupt:
        t.blobs.fetch(digest, tmp_path / "b")
    proxy.fault("refuse")
    t.blobs.has(digest)
    with pytest.raises(StoreError) as down:
        t.blobs.has(digest)
    for err in (corrupt.value, down.value):
        texts += [str(err), repr(err), "".join(traceback.format_exception(err))]
        assert err.__cause__ is None and err.__context__ is None  # no library exception (with its request) rides along
    texts += warnings + [t.name, repr(t), str(t.stats()), repr(t.blobs), repr(t.actions), str(t.disabled), repr(vars(t))]
    assert len(warnings) == 2 and t.disabled
    for text in texts:
        assert TOKEN not in text and "user:" not in text, text
    assert t.name == f"remote cache http://127.0.0.1:{proxy.port}/{space.prefix}"


def test_url_userinfo_is_sent_as_basic_auth(space, proxy):
    t = tier(f"http://alice:{TOKEN}@127.0.0.1:{proxy.port}/{space.prefix}")
    t.actions.get(KEY)
    assert proxy.log()[0][3]["Authorization"] == "Basic " + base64.b64encode(f"alice:{TOKEN}".encode()).decode()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (f"http://h/c?token={TOKEN}", "--remote-cache http://h/c: a query string or fragment is not supported; pass a token with --remote-cache-header NAME=VALUE"),
        (f"ftp://u:{TOKEN}@h/c", "--remote-cache: 'ftp://h/c' is not an http:// or https:// URL with a host"),
        (f"http://u:{TOKEN}@h:99999/c", "--remote-cache: not a valid URL (expected http[s]://host[:port][/prefix])"),
    ],
)
def test_bad_urls_are_refused_without_their_secrets(url, message):
    with pytest.raises(UsageError) as err:
        HttpTier(url)
    assert str(err.value) == message


def test_headers_from_the_command_line_and_the_environment():
    env = {"PTEBUILD_REMOTE_CACHE_HEADER": f"Authorization=Bearer {TOKEN}\nX-A=1\n"}
    assert headers_from(["x-a=2"], env) == {"Authorization": f"Bearer {TOKEN}", "x-a": "2"}
    for bad in (f"no-equals-{TOKEN}", f"Bad Name={TOKEN}", f"X=a\r\nInjected: {TOKEN}"):
        with pytest.raises(UsageError) as err:
            headers_from([bad], {})
        assert TOKEN not in str(err.value)
    with pytest.raises(UsageError) as err:
        HttpTier("http://127.0.0.1:1", headers={"X": f"{TOKEN}\n"})
    assert TOKEN not in str(err.value)


# --- streaming -------------------------------------------------------------------------------

STREAM_SCRIPT = textwrap.dedent(
    """
    import resource, sys
    from pathlib import Path
    from ptebuild.store.remote import HttpTier
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


def test_a_warn_callback_may_ask_for_stats(space, proxy, tmp_path):
    """The front end's warn may read the counters; warnings from several threads must not deadlock."""
    import threading

    files = [blob(tmp_path, f"b{i}.bin", 20_000) for i in range(4)]
    seen: list[dict] = []
    t = HttpTier(f"{proxy.origin}/{space.prefix}", jobs=4, max_failures=20, backoff=0.01,
                 warn=lambda line: seen.append(t.stats()))
    proxy.fault("500", times=4, methods=["PUT"])
    worker = threading.Thread(target=t.blobs.put_many, args=(files,), daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "deadlock: warn called with the counters' lock held"
    # 4 faults over 4 uploads: one warning per upload that met any (a retry may meet a second)
    assert t.stats()["errors"] == 4 and 1 <= len(seen) <= 4 and all(s["errors"] >= 1 for s in seen)
