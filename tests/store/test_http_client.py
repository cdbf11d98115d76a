"""Faults met by the HTTP client (ptebuild.store.http_client): retries, warnings, the failure budget.

Against a real nginx, with faults from a real proxy.
"""

from __future__ import annotations

import hashlib
import time

import pytest
from http_helpers import KEY, blob, entry_path, leftovers, tier

from ptebuild.errors import StoreError
from ptebuild.store.http import HttpTier


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


def test_server_down_switches_the_tier_off(closed_port, tmp_path):
    url = f"http://127.0.0.1:{closed_port}/cache"
    warnings: list[str] = []
    t = tier(url, warnings)
    t0 = time.monotonic()
    with pytest.raises(StoreError) as err:
        t.actions.get(KEY)
    assert str(err.value) == f"3 failed requests (last: GET {entry_path(KEY)}: connection refused)"
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
