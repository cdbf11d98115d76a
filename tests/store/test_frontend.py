"""The cache front end (ptebuild.store.frontend.Cache) over real tiers: local cache folders, and a
real nginx as the remote where one is needed (``tests/remote/cache_fixtures.py``).

What it is held to: a saved result is found and restored with its bytes verified, or is a miss
that says why (stale dependencies, another entry's shape, a blob gone or wrong, never served); one
process lowers a key at a time; a tier that fails is switched off alone, with one warning, and the
others go on; a remote hit is verified and kept locally, or, with no local tier, kept in a
temporary folder until the build ends; the build's tier counters are persisted. Two runners
sharing a server through faults: ``tests/remote/test_remote_frontend.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from http_helpers import tier

from ptebuild.errors import CorruptObject, StoreError
from ptebuild.results import ActionResult, OutputFile, Source
from ptebuild.store import Store
from ptebuild.store.frontend import Cache, Lookup
from ptebuild.store.local import LocalTier

KEY = "c0ffee00" * 4
ALIAS = "a11a5000" * 4
OTHER = "0ddba11c" * 4


def make_result(folder: Path, key: str = KEY, sizes: tuple[int, ...] = (3000, 70_000)) -> tuple[ActionResult, dict[str, Path]]:
    """A result of two outputs (``policy.pte``, ``policy_weights.ptd``) of random bytes, written to ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    files, outputs = {}, []
    for name, size in zip(("policy.pte", "policy_weights.ptd"), sizes):
        data = os.urandom(size)
        (folder / name).write_bytes(data)
        files[name] = folder / name
        outputs.append(OutputFile(name, hashlib.sha256(data).hexdigest(), size))
    return ActionResult(key=key, target="policy", kind="program", outputs=tuple(outputs), backend="xnnpack"), files


def restore_all(cache: Cache, hit, folder: Path) -> dict[str, bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    cache.restore(hit, {o.name: folder / o.name for o in hit.result.outputs})
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def same_bytes(files: dict[str, Path]) -> dict[str, bytes]:
    return {name: path.read_bytes() for name, path in files.items()}


@pytest.fixture
def local(tmp_path):
    cache = Cache.for_folder(tmp_path / "cache")
    yield cache
    cache.close()


@pytest.fixture
def saved(local, tmp_path) -> tuple[ActionResult, dict[str, Path]]:
    result, files = make_result(tmp_path / "built")
    local.save(result, files, aliases=(ALIAS,))
    return result, files


def unwritable(tmp_path: Path) -> Path:
    """A cache folder no process can create (its parent is a file): every write there fails."""
    (tmp_path / "a-file").write_text("")
    return tmp_path / "a-file" / "cache"


# -- the local tier -----------------------------------------------------------------------------


def test_a_saved_result_is_found_and_restored(local, saved, tmp_path):
    result, files = saved
    found = local.lookup(KEY)
    assert found.stale == [] and found.hit is not None
    assert (found.hit.result, found.hit.source, found.hit.blobs) == (result, Source.LOCAL, {})
    assert restore_all(local, found.hit, tmp_path / "out") == same_bytes(files)
    assert local.lookup(OTHER) == Lookup(None, [])


def test_an_alias_finds_the_result_only_when_asked_as_one(local, saved):
    result, _ = saved
    assert local.lookup(ALIAS, alias=True).hit.result == result
    assert local.lookup(ALIAS).hit is None  # the entry's own key is another: not this key's result


def test_an_entry_whose_dependencies_changed_is_a_miss_that_says_why(local, saved):
    seen = []

    def check(result: ActionResult) -> list[str]:
        seen.append(result.key)
        return ["torch version changed (2.10.0 -> 2.11.0)"]

    assert local.lookup(KEY, check) == Lookup(None, ["torch version changed (2.10.0 -> 2.11.0)"])
    assert seen == [KEY]
    assert local.lookup(KEY, lambda result: []).hit is not None


def test_an_entry_of_another_shape_is_a_miss(local):
    local.memo_put(OTHER, {"format": "ptebuild-resolved-manifest", "programs": []})
    assert local.memo_get(OTHER) == {"format": "ptebuild-resolved-manifest", "programs": []}
    assert local.lookup(OTHER) == Lookup(None, [])
    assert local.memo_get(KEY) is None


def test_restore_refuses_an_output_the_result_does_not_name(local, saved, tmp_path):
    hit = local.lookup(KEY).hit
    with pytest.raises(CorruptObject) as raised:
        local.restore(hit, {"policy.bpte": tmp_path / "policy.bpte"})
    assert str(raised.value) == ("the cached result of policy has no policy.bpte; build again "
                                 "(`ptebuild cache verify` removes broken entries)")


def test_a_blob_the_cache_lost_is_not_restored(local, saved, tmp_path):
    result, _ = saved
    ptd = result.output("policy_weights.ptd")
    Store(tmp_path / "cache").cas.remove(ptd.sha256)
    hit = local.lookup(KEY).hit  # the entry is still there
    with pytest.raises(CorruptObject) as raised:
        local.restore(hit, {"policy_weights.ptd": tmp_path / "policy_weights.ptd"})
    assert str(raised.value) == f"object {ptd.sha256} (policy_weights.ptd) is missing from the cache; build again to store it anew"
    assert not (tmp_path / "policy_weights.ptd").exists()


def test_a_blob_whose_bytes_changed_is_never_restored(local, saved, tmp_path):
    result, _ = saved
    pte = result.output("policy.pte")
    blob = Store(tmp_path / "cache").cas.path(pte.sha256)
    data = bytearray(blob.read_bytes())
    data[100] ^= 0xFF
    os.chmod(blob, 0o644)
    blob.write_bytes(data)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(CorruptObject, match=f"^object {pte.sha256} in the cache is corrupt"):
        local.restore_result(result, {"policy.pte": out / "policy.pte"})
    assert list(out.iterdir()) == [] and not blob.exists()  # nothing written, the blob removed


def test_missing_blobs_and_fetch_blob(local, saved, tmp_path):
    result, files = saved
    pte, ptd = (o.sha256 for o in result.outputs)
    absent = hashlib.sha256(b"never stored").hexdigest()
    assert local.missing_blobs([absent, pte, absent, ptd, "0" * 64]) == [absent, "0" * 64]  # in order, once each
    local.fetch_blob(ptd, tmp_path / "w.ptd")
    assert (tmp_path / "w.ptd").read_bytes() == files["policy_weights.ptd"].read_bytes()
    with pytest.raises(CorruptObject) as raised:
        local.fetch_blob(absent, tmp_path / "x")
    assert str(raised.value) == f"object {absent} is missing from the cache; build again to store it anew"


def test_without_any_tier(tmp_path):
    warnings: list[str] = []
    cache = Cache([], warnings.append)
    assert not cache.enabled and cache.output_store() is None and cache.lookup(KEY) == Lookup(None, [])
    with pytest.raises(StoreError) as raised:
        cache.fetch_blob("ab" * 32, tmp_path / "x")
    assert str(raised.value) == "no cache tier is available; give a cache (--cache DIR or --remote-cache URL)"
    cache.try_lock(KEY).release()  # nothing to share a lowering with: always "got it"
    assert cache.last("policy") is None and cache.memo_get(KEY) is None and cache.entry_files([KEY]) == []
    assert warnings == []


def test_files_are_digested_once_until_they_change(local, tmp_path):
    path = tmp_path / "model.py"
    path.write_bytes(b"x = 1\n")
    assert local.digest_file(path) == (hashlib.sha256(b"x = 1\n").hexdigest(), 6)
    path.write_bytes(b"x = 22\n")
    assert local.digest_file(path) == (hashlib.sha256(b"x = 22\n").hexdigest(), 7)


def test_the_output_store_is_the_local_blob_store(local, saved, tmp_path):
    result, _ = saved
    cas = local.output_store()
    assert cas is not None and cas.has(result.outputs[0].sha256)
    assert cas.root == tmp_path / "cache" / "objects"


def test_history_counters_and_entry_files(local, saved, tmp_path):
    result, _ = saved
    assert local.last("manifests/robot.toml:policy") is None
    local.remember("manifests/robot.toml:policy", KEY)
    assert local.last("manifests/robot.toml:policy") == result
    local.count(True)
    local.count(True)
    local.count(False)
    assert Store(tmp_path / "cache").counters() == {"hits": 2, "misses": 1}
    [entry] = local.entry_files([KEY])
    assert entry.is_file() and KEY in entry.name


LOCKER = textwrap.dedent(
    """
    import sys
    from ptebuild.store.frontend import Cache
    lock = Cache.for_folder(sys.argv[1]).try_lock(sys.argv[2])
    print("got" if lock is not None else "held")
    """
)


def test_one_process_at_a_time_lowers_a_key(local, tmp_path):
    def other_process() -> str:
        done = subprocess.run([sys.executable, "-c", LOCKER, str(tmp_path / "cache"), KEY],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    lock = local.try_lock(KEY)
    assert lock is not None
    assert other_process() == "held"
    lock.release()
    assert other_process() == "got"


def test_a_cache_folder_that_cannot_be_written_fails_the_build_when_it_is_the_only_tier(tmp_path):
    cache = Cache.for_folder(unwritable(tmp_path))
    result, files = make_result(tmp_path / "built")
    with pytest.raises(StoreError, match=f"^local cache {re.escape(str(unwritable(tmp_path)))} disabled for this build: "):
        cache.save(result, files)


# -- with a remote tier (a real nginx) ----------------------------------------------------------


def runner(root: Path, url: str, warnings: list[str]) -> Cache:
    """A front end over the local cache ``root`` and the remote at ``url``, as a build opens them."""
    return Cache([LocalTier(Store(root)), tier(url, warnings)], warnings.append, local_root=root)


@pytest.fixture
def on_server(space, tmp_path) -> tuple[ActionResult, dict[str, Path]]:
    """Another machine built the result and saved it to the server (and its own cache)."""
    warnings: list[str] = []
    a = runner(tmp_path / "a", space.url, warnings)
    result, files = make_result(tmp_path / "a-built")
    a.save(result, files)
    a.close()
    assert warnings == []
    return result, files


def test_a_local_cache_that_cannot_be_written_is_switched_off_alone(space, tmp_path):
    warnings: list[str] = []
    cache = runner(unwritable(tmp_path), space.url, warnings)
    result, files = make_result(tmp_path / "built")
    cache.save(result, files)
    assert len(warnings) == 1 and warnings[0].startswith(f"local cache {unwritable(tmp_path)} disabled for this build: ")
    assert cache.local is None and [t.source for t in cache.tiers] == ["remote"]
    assert cache.output_store() is None
    assert sorted(cache.stats()) == sorted([f"local cache {unwritable(tmp_path)}", f"remote cache {space.url}"])  # both counted
    cache.close()
    fresh = runner(tmp_path / "fresh", space.url, warnings)
    assert fresh.lookup(KEY).hit.source is Source.REMOTE  # the build's result reached the server
    fresh.close()
    assert len(warnings) == 1


def test_a_remote_hit_is_kept_locally(space, tmp_path, on_server):
    _, files = on_server
    warnings: list[str] = []
    b = runner(tmp_path / "b", space.url, warnings)
    hit = b.lookup(KEY).hit
    assert (hit.source, hit.blobs) == (Source.REMOTE, {})
    assert restore_all(b, hit, tmp_path / "b-out") == same_bytes(files)
    b.close()
    local_only = Cache.for_folder(tmp_path / "b")
    assert local_only.lookup(KEY).hit.source is Source.LOCAL
    local_only.close()
    stats = json.loads((tmp_path / "b" / "last-build.json").read_text())["tiers"]
    assert stats[f"remote cache {space.url}"]["hits"] == 1 and stats[f"remote cache {space.url}"]["downloads"] == 2
    assert stats[f"local cache {tmp_path / 'b'}"] == {"source": "local"}
    assert warnings == []


def test_without_a_local_tier_a_remote_hit_waits_in_a_temporary_folder(space, tmp_path, on_server):
    result, files = on_server
    warnings: list[str] = []
    b = Cache([tier(space.url, warnings)], warnings.append, local_root=tmp_path / "b")
    hit = b.lookup(KEY).hit
    assert hit.source is Source.REMOTE and sorted(hit.blobs) == result.digests
    held = {path.parent for path in hit.blobs.values()}
    assert len(held) == 1 and held.pop().parent == tmp_path / "b" / "tmp"
    assert restore_all(b, hit, tmp_path / "b-out") == same_bytes(files)
    b.close()
    assert list((tmp_path / "b" / "tmp").iterdir()) == []  # removed at the end of the build
    assert warnings == []


def test_a_copy_changed_in_the_temporary_folder_is_refused(space, tmp_path, on_server):
    result, _ = on_server
    b = Cache([tier(space.url)], lambda text: None, local_root=tmp_path / "b")
    hit = b.lookup(KEY).hit
    pte = result.output("policy.pte")
    hit.blobs[pte.sha256].write_bytes(b"changed on disk")
    with pytest.raises(CorruptObject, match=r"^policy\.pte: the fetched copy changed on disk; build again$"):
        b.restore(hit, {"policy.pte": tmp_path / "policy.pte"})
    b.close()


def test_a_result_found_elsewhere_is_pulled_verified(space, tmp_path, on_server):
    """A node of an executor found the result for this driver: the driver fetches its blobs."""
    result, files = on_server
    b = runner(tmp_path / "b", space.url, [])
    hit = b.pull(result)
    assert hit is not None and hit.source is Source.REMOTE and b.missing_blobs(result.digests) == []
    local_only = Cache.for_folder(tmp_path / "b")
    assert restore_all(local_only, local_only.lookup(KEY).hit, tmp_path / "b-out") == same_bytes(files)
    local_only.close()
    b.close()
    assert Cache.for_folder(tmp_path / "c").pull(result) is None  # no remote to pull from


def test_a_remote_hit_checked_but_not_fetched(space, tmp_path, on_server):
    b = runner(tmp_path / "b", space.url, [])
    assert b.lookup(KEY, local_only=True).hit is None  # the remote is not asked
    hit = b.lookup(KEY, fetch=False).hit
    assert hit.source is Source.REMOTE and hit.blobs == {}
    assert b.stats()[f"remote cache {space.url}"]["downloads"] == 0
    assert Store(tmp_path / "b").actions.get(KEY) is None  # nothing kept locally
    b.close()


def test_the_tier_counters_are_persisted_only_with_a_remote(local, saved, tmp_path):
    local.close()
    assert not (tmp_path / "cache" / "last-build.json").exists()
