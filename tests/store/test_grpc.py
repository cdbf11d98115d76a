"""The gRPC tier (ptebuild.store.grpc) against a real BuildGrid: what only it does (its URLs, metadata,
wire format, TLS, signed entries), and its faults, from a real gRPC proxy (``grpcproxy.py``). The
contract it shares with the HTTP tier, round trips, verified downloads, held-back entries and
streaming: ``test_remote.py``."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import textwrap
import time

import pytest
from helpers import require_module
from http_helpers import KEY, OTHER_KEY, blob, document, grpc_tier, leftovers

from ptebuild.canonical import canonical_bytes
from ptebuild.errors import StoreError, UsageError
from ptebuild.store import entries, reapi
from ptebuild.store.grpc import GrpcTier
from ptebuild.store.grpc_url import split_url

grpc = require_module("grpc", "pip install 'ptebuild[grpc]' (./bootstrap.sh --test installs it)")

LARGE = 5_000_000
"""Over BuildGrid's max batch size (4193280 bytes): sent and read by ByteStream."""


def unique_key() -> str:
    return os.urandom(16).hex()


def raw_call(target: str, method: str, request: bytes) -> bytes:
    """One call to the server, with grpc alone (not through the tier under test)."""
    with grpc.insecure_channel(target) as channel:
        return channel.unary_unary(method)(request, timeout=10)


# --- URLs, registration, metadata --------------------------------------------------------------


@pytest.mark.parametrize(("url", "parts"), [
    ("grpc://127.0.0.1:8980", ("grpc://127.0.0.1:8980", "127.0.0.1:8980", "", False, None)),
    ("grpcs://cache.example.com/main/ci", ("grpcs://cache.example.com/main/ci", "cache.example.com:443", "main/ci", True, None)),
    ("grpc://u:p%40ss@[::1]:9092/", ("grpc://[::1]:9092", "[::1]:9092", "", False, ("u", "p@ss"))),
], ids=["plain", "tls-instance", "userinfo-ipv6"])
def test_urls(url, parts):
    assert split_url(url) == parts


@pytest.mark.parametrize(("url", "message"), [
    ("grpc://h", "--remote-cache grpc://h: a grpc:// URL needs a port; give grpc://host:port"),
    ("grpc://h:1/?token=x", "--remote-cache grpc://h:1: a query string or fragment is not supported; pass a token with "
                            "--remote-cache-header NAME=VALUE"),
    ("grpc://h:99999", "--remote-cache: not a valid URL; give grpc[s]://host[:port][/instance]"),
], ids=["no-port", "query", "bad-port"])
def test_bad_urls(url, message):
    with pytest.raises(UsageError) as err:
        GrpcTier(url)
    assert str(err.value) == message


def test_headers_and_userinfo_travel_as_metadata_and_are_never_shown(grpc_proxy):
    t = grpc_tier(f"grpc://alice:pw-93c1@127.0.0.1:{grpc_proxy.port}", headers={"X-Token": "tok-5e3c7a91"})
    assert t.actions.get(unique_key()) is None
    [[method, metadata, status]] = grpc_proxy.log()
    assert (method, status) == ("/build.bazel.remote.execution.v2.ActionCache/GetActionResult", "NOT_FOUND")
    assert metadata["x-token"] == "tok-5e3c7a91"
    assert metadata["authorization"] == "Basic " + base64.b64encode(b"alice:pw-93c1").decode()
    assert metadata["user-agent"].startswith("ptebuild ")
    shown = f"{t!r} {t.name} {t.blobs!r} {t.actions!r} {t.stats()}"
    assert "tok-5e3c7a91" not in shown and "pw-93c1" not in shown and "alice" not in shown
    t.close()
    with pytest.raises(UsageError) as err:
        grpc_tier(grpc_proxy.url, headers={"X~Token": "tok-5e3c7a91"})
    assert str(err.value) == ("remote cache header X~Token: not a gRPC metadata key; use letters, digits, '-', '_' and '.', "
                              "not grpc-* nor *-bin")


# --- round trips -------------------------------------------------------------------------------


def test_a_blob_of_a_size_never_met_cannot_be_fetched(buildgrid, tmp_path):
    """REAPI names a blob by its digest and size: a size the tier has not met is a caller's error."""
    t = grpc_tier(buildgrid.url)
    with pytest.raises(ValueError, match="the gRPC tier needs the size of blob"):
        t.blobs.fetch("ef" * 32, tmp_path / "z")  # a size never met in this build
    assert list(tmp_path.iterdir()) == [] and t.stats()["errors"] == 0


def test_entry_wire_format(buildgrid, tmp_path):
    """What BuildGrid holds of an entry: an ActionResult naming the output and the envelope, under
    the action digest; the envelope a blob of its own. (Round trips: test_remote.py.)"""
    key = unique_key()
    src, digest = blob(tmp_path, "a.bin", 1000)
    t = grpc_tier(buildgrid.url)
    t.blobs.put_file(src, digest)
    doc = document(key, [digest], [1000])
    t.actions.put(key, doc, [digest])
    raw = raw_call(buildgrid.target, reapi.GET_ACTION_RESULT,
                   reapi.get_action_result_request("", entries.action_digest(key)))
    envelope = canonical_bytes({"document": doc, "format": "ptebuild-remote-action", "key": key, "refs": [digest],
                                "version": 1})
    assert reapi.ActionResult.decode(raw) == reapi.ActionResult((
        reapi.OutputFile("f0.pte", reapi.Digest(digest, 1000)),
        reapi.OutputFile(".ptebuild/entry.json", reapi.Digest.of(envelope))))
    [(_, data, status)] = reapi.batch_read_blobs_response(raw_call(
        buildgrid.target, reapi.BATCH_READ_BLOBS, reapi.batch_read_blobs_request("", [reapi.Digest.of(envelope)])))
    assert status.ok and data == envelope


def test_signed_entries(buildgrid, tmp_path):
    key = unique_key()
    src, digest = blob(tmp_path, "a.bin", 100)
    doc = document(key, [digest], [100])
    signer = grpc_tier(buildgrid.url, secret=b"s3cret")
    signer.blobs.put_file(src, digest)
    signer.actions.put(key, doc, [digest])
    assert grpc_tier(buildgrid.url, secret=b"s3cret").actions.get(key) == doc
    assert grpc_tier(buildgrid.url).actions.get(key) == doc
    warnings: list[str] = []
    wrong = grpc_tier(buildgrid.url, warnings, secret=b"another")
    assert wrong.actions.get(key) is None
    assert warnings == [f"remote cache {buildgrid.url}: entry {key}: wrong signature; refused"]
    assert wrong.stats()["refused"] == 1


# --- faults: retries, warnings, the failure budget ---------------------------------------------


@pytest.mark.parametrize(
    ("mode", "extra", "why"),
    [
        ("status", {"code": "UNAVAILABLE"}, "server unavailable (gRPC UNAVAILABLE)"),
        ("status", {"code": "RESOURCE_EXHAUSTED"}, "gRPC RESOURCE_EXHAUSTED"),
        ("slow", {"delay": 2.5}, "no answer within 2 s"),
        ("truncate", {}, "server unavailable (gRPC UNAVAILABLE)"),
    ],
    ids=["unavailable", "resource-exhausted", "slow", "truncate"],
)
def test_a_transient_fault_is_retried_with_one_warning(buildgrid, grpc_proxy, tmp_path, mode, extra, why):
    src, digest = blob(tmp_path, "a.bin", 1_500_000)
    grpc_tier(buildgrid.url).blobs.put_file(src, digest)
    warnings: list[str] = []
    t = grpc_tier(grpc_proxy.url, warnings, timeout=1.0)
    t.blobs.has(digest, 1_500_000)  # connected, and the capabilities asked
    grpc_proxy.fault(mode, times=1, match="BatchReadBlobs", **extra)
    assert t.blobs.fetch(digest, tmp_path / "b.bin", 1_500_000)
    assert (tmp_path / "b.bin").read_bytes() == src.read_bytes()
    assert warnings == [f"remote cache {grpc_proxy.url}: BatchReadBlobs {digest}: {why}; succeeded after 1 retry"]
    assert t.stats()["errors"] == 1 and leftovers(tmp_path) == []


def test_server_down_switches_the_tier_off(closed_port, tmp_path):
    url = f"grpc://127.0.0.1:{closed_port}"
    warnings: list[str] = []
    t = grpc_tier(url, warnings)
    t0 = time.monotonic()
    with pytest.raises(StoreError) as err:
        t.actions.get(KEY)
    assert str(err.value) == f"3 failed requests (last: GetActionResult {entries.action_digest(KEY).hash}: connection refused)"
    assert warnings == [] and t.disabled and t.stats()["disabled"] and t.stats()["errors"] == 3
    with pytest.raises(StoreError):  # later calls fail at once, without the network
        t.blobs.fetch("ab" * 32, tmp_path / "x", 10)
    with pytest.raises(StoreError):
        t.blobs.put_file(blob(tmp_path, "a", 10)[0])
    assert time.monotonic() - t0 < 2


def test_repeated_unavailable_across_operations_switch_the_tier_off(grpc_proxy):
    warnings: list[str] = []
    t = grpc_tier(grpc_proxy.url, warnings, retries=0)
    grpc_proxy.fault("status", code="UNAVAILABLE", match="ActionCache")
    assert t.actions.get(KEY) is None
    assert t.actions.get(OTHER_KEY) is None
    with pytest.raises(StoreError, match=r"^3 failed requests \(last: GetActionResult [0-9a-f]{64}: server unavailable \(gRPC UNAVAILABLE\)\)$"):
        t.actions.get(KEY)
    assert len(warnings) == 2 and all(w.endswith("server unavailable (gRPC UNAVAILABLE); treated as a miss") for w in warnings)


def test_killed_mid_upload(buildgrid, grpc_proxy, tmp_path):
    files = [blob(tmp_path, f"b{i}.bin", 300_000 + i) for i in range(4)] + [blob(tmp_path, f"l{i}.bin", LARGE + i) for i in range(3)]
    t = grpc_tier(grpc_proxy.url, jobs=2)
    grpc_proxy.die_after(3)  # GetCapabilities, FindMissingBlobs, one transfer: then the server is gone
    with pytest.raises(StoreError, match="connection refused|server closed the connection|server unavailable|connection reset"):
        t.blobs.put_many(files)
    direct = grpc_tier(buildgrid.url)
    stored = [d for p, d in files if direct.blobs.has(d, p.stat().st_size)]
    assert len(stored) < len(files)
    for p, d in files:  # what reached the server is whole (BuildGrid checks every upload's hash too)
        if d in stored:
            assert direct.blobs.fetch(d, tmp_path / f"back-{d}", p.stat().st_size)


def test_refuse_mode_then_back(buildgrid, grpc_proxy, tmp_path):
    src, digest = blob(tmp_path, "a.bin", 1000)
    warnings: list[str] = []
    t = grpc_tier(grpc_proxy.url, warnings, retries=0, max_failures=5)
    assert t.blobs.put_file(src, digest)  # opens the channel's connection
    grpc_proxy.fault("refuse")
    assert t.blobs.has(digest, 1000) is False
    # A refused new connection, or the proxy closing the open one first (a loaded machine sees either).
    assert warnings[-1].endswith((f"FindMissingBlobs {digest}: connection refused; treated as a miss",
                                  f"FindMissingBlobs {digest}: server closed the connection; treated as a miss")), warnings
    grpc_proxy.reset()
    deadline = time.monotonic() + 5  # the channel reconnects within its backoff (at most 1 s)
    while not t.blobs.has(digest, 1000):
        assert time.monotonic() < deadline, warnings


def test_refused_credentials_turn_uploads_off_or_the_tier(buildgrid, grpc_proxy, tmp_path):
    src, digest = blob(tmp_path, "a.bin", 1000)
    warnings: list[str] = []
    t = grpc_tier(grpc_proxy.url, warnings)
    t.blobs.has(digest, 1000)
    grpc_proxy.fault("status", code="PERMISSION_DENIED", match="BatchUpdateBlobs")
    t.blobs.put_file(src, digest)
    t.blobs.put_file(src, digest)
    assert t.writable is False and len(warnings) == 1 and warnings[0].endswith(
        f"BatchUpdateBlobs {digest}: gRPC PERMISSION_DENIED; uploads turned off for this build")
    assert t.actions.get(KEY) is None  # reads go on
    grpc_proxy.fault("status", code="UNAUTHENTICATED")
    with pytest.raises(StoreError, match=r"^GetActionResult [0-9a-f]{64}: gRPC UNAUTHENTICATED \(check the credentials: --remote-cache-header\)$"):
        t.actions.get(KEY)


# --- streaming ---------------------------------------------------------------------------------

TLS_SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from ptebuild.errors import StoreError
    from ptebuild.store.grpc import GrpcTier
    url, src, digest, size = sys.argv[1:]
    t = GrpcTier(url, timeout=5.0, backoff=0.01)
    try:
        t.blobs.put_file(Path(src), digest)
        print("found" if t.blobs.has(digest, int(size)) else "absent")
    except StoreError as exc:
        print("off:", exc)
    """
)


def test_grpcs_speaks_tls_and_checks_the_server_certificate(buildgrid, tmp_path):
    """TLS (grpcs://) to the proxy with a certificate of a private CA: trusted through
    $GRPC_DEFAULT_SSL_ROOTS_FILE_PATH (read once per process: a process each), refused without."""
    import shutil

    from cache_fixtures import GrpcProxy
    from helpers import unavailable

    openssl = shutil.which("openssl")
    if openssl is None:
        unavailable("openssl is not installed (it makes the test certificate)")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost"], check=True, capture_output=True)
    src, digest = blob(tmp_path, "a.bin", 1000)
    proxy = GrpcProxy(buildgrid.target, "--tls", str(cert), str(key))
    try:
        url = f"grpcs://localhost:{proxy.port}"

        def run(**env: str) -> str:
            done = subprocess.run([sys.executable, "-c", TLS_SCRIPT, url, str(src), digest, "1000"],
                                  capture_output=True, text=True, timeout=60, env={**os.environ, **env})
            assert done.returncode == 0, done.stderr
            return done.stdout.strip()

        assert run(GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=str(cert)) == "found"
        assert grpc_tier(buildgrid.url).blobs.has(digest, 1000)  # it went through to BuildGrid
        refused = run()  # the system's roots do not know the private CA
        assert refused.startswith('off: 3 failed requests (last: GetCapabilities "": '), refused
        assert refused.endswith(("TLS error)", "server unavailable (gRPC UNAVAILABLE))")), refused
    finally:
        proxy.stop()
