"""Two "runners" (two local caches) sharing one real nginx through the cache front end.

No builder, no torch: an action result and its output files are made by hand, saved by runner A
and looked up by runner B, with and without faults between B and the server.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from http_helpers import entry_path, stored_entry

from ptebuild.results import ActionResult, OutputFile, Source
from ptebuild.store import Store, frontend, local  # ptebuild's own code: never optional
from ptebuild.store.http import HttpTier

KEY = "5eed" * 8


def make_result(folder: Path) -> tuple[ActionResult, dict[str, Path]]:
    folder.mkdir(parents=True, exist_ok=True)
    files, outputs = {}, []
    for name, size in (("policy.pte", 300_000), ("policy.ptd", 1_200_000)):
        data = os.urandom(size)
        (folder / name).write_bytes(data)
        files[name] = folder / name
        outputs.append(OutputFile(name, hashlib.sha256(data).hexdigest(), size))
    result = ActionResult(key=KEY, target="policy", kind="program", outputs=tuple(outputs), backend="xnnpack")
    return result, files


def runner(tmp_path: Path, name: str, url: str, warnings: list[str], **remote) -> frontend.Cache:
    store = Store(tmp_path / name / "cache")
    remote.setdefault("backoff", 0.01)
    remote.setdefault("timeout", 2.0)
    tiers = [local.LocalTier(store), HttpTier(url, warn=warnings.append, **remote)]
    return frontend.Cache(tiers, warnings.append, local_root=store.root)


@pytest.fixture
def saved_by_a(space, tmp_path):
    """Runner A built the program and saved it (local cache and nginx)."""
    warnings: list[str] = []
    a = runner(tmp_path, "a", space.url, warnings)
    result, files = make_result(tmp_path / "a" / "out")
    a.save(result, files)
    a.close()
    assert warnings == []
    files_of_a = sorted(space.files())
    assert [f for f in files_of_a if f.startswith("ac/")] == [entry_path(KEY)]
    assert {f"cas/{o.sha256}" for o in result.outputs} < set(files_of_a) and len(files_of_a) == 4  # and the envelope
    return result, files


def local_entries(tmp_path: Path, name: str) -> tuple[dict | None, list[str]]:
    store = Store(tmp_path / name / "cache")
    try:
        return store.actions.get(KEY), sorted(p.name for p in (store.root / "objects").rglob("*") if p.is_file())
    finally:
        store.close()


def test_runner_b_restores_from_the_remote_and_then_locally(space, tmp_path, saved_by_a):
    result, files = saved_by_a
    warnings: list[str] = []
    b = runner(tmp_path, "b", space.url, warnings)
    hit = b.lookup(KEY).hit
    assert hit is not None and hit.source is Source.REMOTE and hit.result == result
    out = tmp_path / "b" / "out"
    out.mkdir(parents=True)
    b.restore(hit, {name: out / name for name in files})
    for name, path in files.items():
        assert (out / name).read_bytes() == path.read_bytes()
    stats = b.stats()[f"remote cache {space.url}"]
    assert (stats["hits"], stats["downloads"], stats["errors"]) == (1, 2, 0)
    b.close()
    assert warnings == []

    again = runner(tmp_path, "b", f"{space.server.url}/empty-{space.prefix}", warnings)
    hit = again.lookup(KEY).hit
    assert hit is not None and hit.source is Source.LOCAL  # the remote hit was kept locally
    again.close()


@pytest.mark.parametrize("mode", ["flip", "truncate"])
@pytest.mark.parametrize("target", ["output", "envelope"])
def test_wrong_bytes_from_the_remote_are_a_miss_and_never_kept(space, proxy, tmp_path, saved_by_a, mode, target):
    result, _ = saved_by_a
    envelope = hashlib.sha256(stored_entry(space.dir, KEY)[1]).hexdigest()
    warnings: list[str] = []
    b = runner(tmp_path, "b", f"{proxy.origin}/{space.prefix}", warnings, max_failures=10)
    blob = result.outputs[1].sha256 if target == "output" else envelope
    proxy.fault(mode, match=f"/cas/{blob}", methods=["GET"])
    assert b.lookup(KEY).hit is None
    b.close()
    assert local_entries(tmp_path, "b") == (None, [])
    assert len(warnings) == 1, warnings
    if target == "output":
        assert f" blob {blob[:12]} " in warnings[0] and warnings[0].endswith("; building instead"), warnings
    elif mode == "flip":
        assert f": entry {KEY}: its envelope: blob {blob[:12]} has wrong bytes (" in warnings[0], warnings
        assert warnings[0].endswith("); refused"), warnings
    else:
        assert warnings[0].endswith(f"GET cas/{blob}: body truncated (connection closed early); treated as a miss")


def test_server_killed_mid_build_switches_the_remote_off_once(space, proxy, tmp_path, saved_by_a):
    warnings: list[str] = []
    b = runner(tmp_path, "b", f"{proxy.origin}/{space.prefix}", warnings)
    proxy.die_after(1)  # the entry comes back, then the server is gone
    assert b.lookup(KEY).hit is None
    assert b.lookup(KEY).hit is None  # the remote is off: no second warning, no waiting
    result, files = make_result(tmp_path / "b" / "built")
    b.save(result, files)  # the build finishes locally
    assert b.lookup(KEY).hit.source is Source.LOCAL
    b.close()
    assert len(warnings) == 1 and warnings[0].startswith(f"remote cache {proxy.origin}/{space.prefix} disabled for this build: 3 failed requests")


def test_a_500_is_retried_and_the_hit_used(space, proxy, tmp_path, saved_by_a):
    warnings: list[str] = []
    b = runner(tmp_path, "b", f"{proxy.origin}/{space.prefix}", warnings)
    proxy.fault("500", times=1, match="/cas/")
    hit = b.lookup(KEY).hit
    assert hit is not None and hit.source is Source.REMOTE
    b.close()
    assert len(warnings) == 1 and "HTTP 500 Internal Server Error; succeeded after 1 retry" in warnings[0]
    entry, blobs = local_entries(tmp_path, "b")
    assert entry is not None and len(blobs) == 2


def test_a_hit_fetches_only_the_outputs_wanted_and_the_rest_when_restored(space, tmp_path, saved_by_a):
    """A shared-weights member needs its .pte: the .ptd is checked on the server, not downloaded,
    and fetched (verified, kept locally) only if a restore asks for it later."""
    result, files = saved_by_a
    warnings: list[str] = []
    b = runner(tmp_path, "b", space.url, warnings)
    hit = b.lookup(KEY, wanted=lambda found: ["policy.pte"]).hit
    assert hit is not None and hit.source is Source.REMOTE
    assert b.stats()[f"remote cache {space.url}"]["downloads"] == 1
    _, objects = local_entries(tmp_path, "b")
    pte, ptd = (o.sha256 for o in result.outputs)
    store = Store(tmp_path / "b" / "cache")
    assert store.actions.read(KEY)["refs"] == [pte] and objects == [pte[2:]]  # the local entry names what it holds
    store.close()
    out = tmp_path / "b" / "out"
    out.mkdir(parents=True)
    b.restore_result(result, {"policy.ptd": out / "policy.ptd"})
    assert (out / "policy.ptd").read_bytes() == files["policy.ptd"].read_bytes()
    assert b.stats()[f"remote cache {space.url}"]["downloads"] == 2
    assert sorted(local_entries(tmp_path, "b")[1]) == sorted([pte[2:], ptd[2:]])
    b.close()
    assert warnings == []


def test_a_hit_whose_unfetched_blob_is_gone_from_the_server_is_a_miss(space, tmp_path, saved_by_a):
    result, _ = saved_by_a
    ptd = next(o.sha256 for o in result.outputs if o.name == "policy.ptd")
    (space.dir / "cas" / ptd).unlink()  # evicted from the server
    b = runner(tmp_path, "b", space.url, [])
    assert b.lookup(KEY, wanted=lambda found: ["policy.pte"]).hit is None
    b.close()
