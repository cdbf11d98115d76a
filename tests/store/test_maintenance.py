import os
import time

import pytest
from helpers import put_record
from hypothesis import given, settings
from hypothesis import strategies as st

from ptebuild.store import CacheAudit, GcReport, Store, maintenance

NOW = time.time()
OLD = NOW - 2 * maintenance.GRACE_SECONDS


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "cache")


def key(i):
    return f"{i:032x}"




def age_blobs(store, when=OLD):
    for _, path in store.cas:
        os.utime(path, (when, when), follow_symlinks=False)


def test_gc_evicts_least_recently_used_first_and_keeps_shared_blobs(store):
    shared = store.cas.put_bytes(b"s" * 1000)
    a = store.cas.put_bytes(b"a" * 1000)
    b = store.cas.put_bytes(b"b" * 1000)
    put_record(store, 1, [shared, a], last_use=NOW - 100)  # oldest use
    put_record(store, 2, [shared, b], last_use=NOW - 10)
    age_blobs(store)
    before = store.stats()["bytes"]
    report = maintenance.gc(store, before - 500, now=NOW)
    assert isinstance(report, GcReport)
    assert (report.records_removed, report.blobs_removed) == (1, 1)
    assert store.actions.get(key(1)) is None and store.actions.get(key(2)) is not None
    assert store.cas.has(shared) and store.cas.has(b) and not store.cas.has(a)
    assert report.bytes_freed == before - store.stats()["bytes"]


def test_gc_removes_old_orphans_but_not_young_ones(store):
    old = store.cas.put_bytes(b"old orphan")
    age_blobs(store)
    young = store.cas.put_bytes(b"young orphan: its record may be on its way")
    report = maintenance.gc(store, 1 << 30, now=NOW)
    assert report.blobs_removed == 1 and report.records_removed == 0
    assert not store.cas.has(old) and store.cas.has(young)


def test_gc_zero_empties_the_store(store):
    d = store.cas.put_bytes(b"x" * 100)
    put_record(store, 1, [d], last_use=NOW)
    report = store.gc(0)
    assert report.records_removed == 1 and report.blobs_removed == 1
    assert store.stats()["bytes"] == 0


def test_gc_removes_stale_temp_files_only(store):
    store.cas.put_bytes(b"make folders")
    stale = store.root / "objects" / ".put-dead.tmp"
    fresh = store.root / "objects" / ".put-live.tmp"
    stale.write_bytes(b"partial")
    fresh.write_bytes(b"partial")
    os.utime(stale, (OLD, OLD))
    report = maintenance.gc(store, 1 << 30, now=NOW)
    assert report.temps_removed == 1
    assert not stale.exists() and fresh.exists()


def test_gc_drops_damaged_records_and_records_missing_blobs(store):
    d = store.cas.put_bytes(b"x")
    put_record(store, 1, [d], last_use=NOW)
    put_record(store, 2, ["f" * 64], last_use=NOW)
    store.actions.path(key(1)).write_bytes(b"garbage")
    report = maintenance.gc(store, 1 << 30, now=NOW)
    assert report.records_removed == 2
    assert report.corrupt == (f"action {key(1)}", f"action {key(2)}: needs missing object {'f' * 64}")


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    n_blobs=st.integers(1, 6),
    n_records=st.integers(0, 6),
)
def test_gc_never_deletes_a_blob_a_kept_record_needs(tmp_path_factory, data, n_blobs, n_records):
    store = Store(tmp_path_factory.mktemp("c"))
    blobs = [store.cas.put_bytes(bytes([i]) * (100 * (i + 1))) for i in range(n_blobs)]
    for i in range(n_records):
        refs = data.draw(st.lists(st.sampled_from(blobs), max_size=3, unique=True))
        put_record(store, i, refs, last_use=NOW - data.draw(st.integers(0, 1000)))
    if data.draw(st.booleans()):
        age_blobs(store)
    percent = data.draw(st.integers(0, 110))  # record sizes vary: draw a share, not bytes
    max_size = store.stats()["bytes"] * percent // 100
    report = maintenance.gc(store, max_size, now=NOW)
    kept = 0
    for k, _ in store.actions:
        kept += 1
        body = store.actions.read(k)
        assert all(store.cas.has(d) for d in body["refs"])
    assert report.bytes_kept == store.stats()["bytes"]
    if kept:  # records are evicted only while the store is too big
        assert report.bytes_kept <= max_size


def test_verify_drops_corrupt_blobs_records_and_dependants(store):
    good = store.cas.put_bytes(b"good")
    bad = store.cas.put_bytes(b"bad bytes")
    put_record(store, 1, [good], last_use=NOW)
    put_record(store, 2, [bad], last_use=NOW)
    put_record(store, 3, [good], last_use=NOW)
    path = store.cas.path(bad)
    os.chmod(path, 0o644)
    path.write_bytes(b"bad bytez")
    store.actions.path(key(3)).write_bytes(store.actions.path(key(3)).read_bytes()[:-5])
    report = store.verify()
    assert isinstance(report, CacheAudit) and not report.ok
    assert report.corrupt == (
        f"object {bad}",
        f"action {key(2)}: needs missing object {bad}",
        f"action {key(3)}",
    )
    assert (report.blobs_checked, report.records_checked) == (2, 3)
    assert (report.blobs_removed, report.records_removed) == (1, 2)
    assert store.verify().ok
    assert store.actions.get(key(1)) is not None


def test_stats(store):
    d = store.cas.put_bytes(b"12345")
    put_record(store, 1, [d], last_use=NOW)
    store.record_hit()
    s = store.stats()
    assert (s["entries"], s["blobs"], s["blob_bytes"], s["hits"], s["misses"]) == (1, 1, 5, 1, 0)
    assert s["bytes"] == 5 + store.actions.path(key(1)).stat().st_size
