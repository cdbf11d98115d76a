"""`ptebuild cache stats|gc|verify` through ptebuild.cli.main: output, exit codes 0/1/2, one-line errors.

The store is filled with the Store API directly (blobs + action records with refs): no torch.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from helpers import put_record

from ptebuild.store import Store

NOW = time.time()




def key(i: int) -> str:
    return f"{i:032x}"




@pytest.fixture
def filled(tmp_path):
    """A store of 3 blobs (1000 B each) and 2 records sharing one blob; record 1 used longest ago."""
    store = Store(tmp_path / "cache")
    shared = store.cas.put_bytes(b"s" * 1000)
    a = store.cas.put_bytes(b"a" * 1000)
    b = store.cas.put_bytes(b"b" * 1000)
    put_record(store, 1, [shared, a], last_use=NOW - 100)
    put_record(store, 2, [shared, b], last_use=NOW - 10)
    for _ in range(3):
        store.record_hit()
    store.record_miss()
    store.close()
    return store, {"shared": shared, "a": a, "b": b}


def test_stats_on_an_empty_store_does_not_create_it(tmp_path, run_cli):
    root = tmp_path / "nothing-here"
    code, out, err = run_cli("cache", "stats", "--cache", root)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"cache     {root} (does not exist yet)",
        "entries   0",
        "blobs     0 (0 B)",
        "size      0 B (0 bytes, blobs and records)",
        "hits      0",
        "misses    0",
        "hit rate  -",
    ]
    assert not root.exists()
    code, out, _ = run_cli("cache", "stats", "--cache", root, "--json")
    assert code == 0
    assert json.loads(out) == {"root": str(root), "entries": 0, "blobs": 0, "bytes": 0, "blob_bytes": 0,
                               "hits": 0, "misses": 0, "hit_rate": None, "last_build_remote": {}}


def test_stats_on_a_filled_store(filled, run_cli):
    store, _ = filled
    code, out, err = run_cli("cache", "stats", "--cache", store.root, "--json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    record_bytes = sum(p.stat().st_size for _, p in store.actions)
    assert doc == {"root": str(store.root), "entries": 2, "blobs": 3, "bytes": 3000 + record_bytes,
                   "blob_bytes": 3000, "hits": 3, "misses": 1, "hit_rate": 0.75, "last_build_remote": {}}
    code, out, _ = run_cli("cache", "stats", "--cache", store.root)
    assert code == 0
    assert "\nentries   2\nblobs     3 (2.9 KiB)\n" in out and "\nhit rate  75.0%\n" in out
    assert f"({3000 + record_bytes} bytes, blobs and records)" in out


def test_stats_default_cache_honours_the_environment(filled, run_cli, monkeypatch):
    store, _ = filled
    monkeypatch.setenv("PTEBUILD_CACHE", str(store.root))
    code, out, _ = run_cli("cache", "stats", "--json")
    assert code == 0 and json.loads(out)["entries"] == 2


def test_gc_evicts_least_recently_used_and_keeps_blobs_of_kept_records(filled, run_cli):
    store, blobs = filled
    before = store.stats()["bytes"]
    # 500 bytes too many: evicting record 1 (the least recently used) and its own blob is enough.
    code, out, err = run_cli("cache", "gc", "--cache", store.root, "--max-size", str(before - 500))
    assert (code, err) == (0, "")
    after = store.stats()["bytes"]
    assert out.startswith("freed ")
    assert ": 1 record, 1 blob, 0 temporary files; " in out
    assert f"(limit {before - 500})" in out
    assert store.actions.read(key(1)) is None and store.actions.read(key(2)) is not None
    assert not store.cas.has(blobs["a"])
    assert store.cas.has(blobs["shared"]) and store.cas.has(blobs["b"])
    assert after <= before - 500


def test_gc_to_zero_empties_the_store(filled, run_cli):
    store, _ = filled
    code, out, _ = run_cli("cache", "gc", "--cache", store.root, "--max-size", "0")
    assert code == 0 and ": 2 records, 3 blobs, " in out and "0 B kept" in out
    assert store.stats()["bytes"] == 0


def test_gc_with_room_to_spare_removes_nothing(filled, run_cli):
    store, _ = filled
    before = store.stats()["bytes"]
    code, out, _ = run_cli("cache", "gc", "--cache", store.root, "--max-size", "1GiB")
    assert code == 0 and out.startswith("freed 0 B: 0 records, 0 blobs, 0 temporary files; ")
    assert store.stats()["bytes"] == before


def test_verify_clean_store(filled, run_cli):
    store, _ = filled
    code, out, err = run_cli("cache", "verify", "--cache", store.root)
    assert (code, err) == (0, "")
    assert out == f"checked 3 blobs and 2 records in {store.root}: all sound\n"


def test_verify_catches_a_flipped_byte_in_a_blob(filled, run_cli):
    store, blobs = filled
    path = store.cas.path(blobs["a"])
    os.chmod(path, 0o644)  # blobs are stored read-only
    data = bytearray(path.read_bytes())
    data[500] ^= 0x01
    path.write_bytes(bytes(data))
    code, out, err = run_cli("cache", "verify", "--cache", store.root)
    assert code == 1
    assert out.splitlines()[:2] == [
        f"corrupt object {blobs['a']}",
        f"corrupt action {key(1)}: needs missing object {blobs['a']}",
    ]
    assert "dropped 1 blob and 1 record" in out
    assert err.count("\n") == 1 and err.startswith("error: 2 corrupt cache entries found and dropped")
    assert not path.exists() and store.actions.read(key(1)) is None
    assert store.cas.has(blobs["shared"]) and store.actions.read(key(2)) is not None
    assert run_cli("cache", "verify", "--cache", store.root)[0] == 0  # what was dropped stays dropped


def test_verify_catches_a_garbled_record(filled, run_cli):
    store, _ = filled
    path = store.actions.path(key(2))
    raw = bytearray(path.read_bytes())
    raw[-10] = ord("#") if raw[-10] != ord("#") else ord("$")
    path.write_bytes(bytes(raw))
    code, out, err = run_cli("cache", "verify", "--cache", store.root)
    assert code == 1
    assert out.splitlines()[0] == f"corrupt action {key(2)}"
    assert "dropped 0 blobs and 1 record" in out
    assert err.count("\n") == 1 and err.startswith("error: 1 corrupt cache entry found and dropped")
    assert not path.exists() and store.actions.read(key(1)) is not None


USAGE = {
    "bad-size": (["cache", "gc", "--max-size", "lots"],
                 "error: --max-size: invalid size 'lots': give a number with an optional unit, e.g. 500M, 2G, 1.5GiB "
                 "(K, M, G, T: powers of 1000, KiB, MiB, GiB, TiB: powers of 1024)"),
    "bad-unit": (["cache", "gc", "--max-size", "5Q"], "error: --max-size: invalid size '5Q': "),
    "negative-size": (["cache", "gc", "--max-size=-1G"], "error: --max-size: invalid size '-1G': "),
    "missing-size": (["cache", "gc"], "error: ptebuild cache gc: the following arguments are required: --max-size"),
    "no-subcommand": (["cache"], "error: ptebuild cache: the following arguments are required: SUBCOMMAND"),
    "unknown-subcommand": (["cache", "clean"], "error: ptebuild cache: argument SUBCOMMAND: invalid choice: 'clean'"),
    "cache-is-a-file": (["cache", "stats", "--cache", "{d}/file"], "error: --cache {d}/file: not a folder"),
}


@pytest.mark.parametrize("argv, message", USAGE.values(), ids=USAGE.keys())
def test_usage_errors_exit_2_with_one_line(tmp_path, run_cli, monkeypatch, argv, message):
    monkeypatch.setenv("PTEBUILD_CACHE", str(tmp_path / "cache"))
    (tmp_path / "file").write_text("not a cache")
    code, out, err = run_cli(*(a.format(d=tmp_path) for a in argv))
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith(message.format(d=tmp_path))
