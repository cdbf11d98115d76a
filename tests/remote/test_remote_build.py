"""Real builds sharing a real nginx: two runners, shards, and faults between a runner and the server.

"Runners" are separate project copies, local caches and output folders on one machine; the
remote cache is the session's nginx (WebDAV PUT), reached directly or through the fault proxy.
"""

from __future__ import annotations

import json

import pytest
from helpers import ptebuild
from runners import Runner, heavy_imports, warnings

from ptebuild.store import Store

ONE = ("--only", "tiny_portable")


@pytest.fixture(scope="module")
def runner_a(nginx, tmp_path_factory):
    """Runner A built the whole tiny manifest and uploaded it."""
    import uuid

    url = f"{nginx.url}/build-{uuid.uuid4().hex[:8]}"
    runner = Runner(tmp_path_factory.mktemp("runner-a"), url)
    document, result = runner.build()
    assert {p["status"] for p in document["targets"]} == {"built"}
    assert warnings(result) == []
    return runner


def test_runner_b_restores_every_program_from_the_remote_without_lowering(runner_a, tmp_path):
    b = Runner(tmp_path / "b", runner_a.remote)
    document, result = b.build(trace_imports=True)
    assert [(p["status"], p.get("source")) for p in document["targets"]] == [("cached", "remote")] * 2
    assert heavy_imports(result) == set()  # no worker, no torch
    assert b.files() == runner_a.files()
    stats = ptebuild("cache", "stats", "--cache", str(b.cache), "--json")
    (remote,) = json.loads(stats.stdout)["last_build_remote"].values()
    assert remote["hits"] == 2 and remote["bytes_down"] >= sum(len(d) for d in b.files().values())
    # The remote hit was copied into B's local cache: the next build is local.
    again, _ = b.build("--remote-cache", "http://127.0.0.1:9/unused")
    assert [(p["status"], p.get("source")) for p in again["targets"]] == [("cached", "local")] * 2


@pytest.mark.parametrize(
    ("fault", "arm"),
    [
        ("flipped byte", lambda proxy: proxy.fault("flip", match="/cas/", methods=["GET"])),
        ("500s", lambda proxy: proxy.fault("status", code=500)),
        ("server gone mid-build", lambda proxy: proxy.die_after(1)),
    ],
)
def test_faults_never_fail_the_build_nor_poison_the_local_cache(runner_a, proxy, tmp_path, fault, arm):
    path = runner_a.remote.split("/", 3)[3]
    b = Runner(tmp_path / "b", f"{proxy.origin}/{path}")
    arm(proxy)
    document, result = b.build(*ONE)
    program = document["targets"][0]
    assert program["status"] in ("built", "cached"), fault
    assert len(warnings(result)) >= 1, fault
    # Whatever happened, the output is A's exact bytes (lowering is deterministic) ...
    expected = {n: d for n, d in runner_a.files().items() if n.startswith("tiny_portable")}
    assert b.files() == expected, fault
    # ... and nothing wrong reached B's local cache.
    report = Store(b.cache).verify()
    assert report.ok, fault


def test_shards_then_a_final_build_lower_each_program_once(nginx, tmp_path):
    url = f"{nginx.url}/shards"
    lowered = []
    for index, shard in enumerate(("1/2", "2/2")):
        runner = Runner(tmp_path / f"shard{index}", url)
        document, _ = runner.build("--shard", shard)
        lowered += [p["name"] for p in document["targets"] if p["status"] == "built"]
    assert sorted(lowered) == ["tiny_portable", "tiny_xnnpack"]
    final = Runner(tmp_path / "final", url)
    document, result = final.build(trace_imports=True)
    assert [(p["status"], p.get("source")) for p in document["targets"]] == [("cached", "remote")] * 2
    assert heavy_imports(result) == set()


def test_remote_upload_no_reads_but_never_writes(runner_a, space, tmp_path):
    runner = Runner(tmp_path / "pr", space.url)
    document, _ = runner.build(*ONE, "--remote-upload=no")
    assert document["targets"][0]["status"] == "built"
    assert space.files() == []


def test_a_shared_weights_group_fetches_only_what_the_folder_needs(nginx, tmp_path):
    """Two programs share one .ptd: a runner that restores them downloads the two .pte and the
    merged .ptd, not each member's own .ptd as well."""
    import uuid

    url = f"{nginx.url}/shared-{uuid.uuid4().hex[:8]}"

    def shared_runner(name: str) -> Runner:
        runner = Runner(tmp_path / name, url)
        text = runner.manifest.read_text()
        runner.manifest.write_text(text.replace("tiny_portable_weights", "tiny_weights").replace("tiny_xnnpack_weights", "tiny_weights"))
        return runner

    a = shared_runner("a")
    a.build()
    b = shared_runner("b")
    document, _ = b.build()
    assert [(p["status"], p.get("source")) for p in document["targets"]] == [("cached", "remote")] * 2
    assert b.files() == a.files()
    stats = ptebuild("cache", "stats", "--cache", str(b.cache), "--json")
    (remote,) = json.loads(stats.stdout)["last_build_remote"].values()
    assert remote["downloads"] == len(b.files()) == 3, remote  # two .pte and the merged .ptd: no member .ptd


def test_the_entries_of_a_build_are_reapi_action_results(runner_a, nginx):
    """What a validating server (bazel-remote) asks of an /ac/ upload: an ActionResult, here read
    by the protobuf library against the REAPI schema, whose blobs are all in the CAS."""
    import hashlib

    from reapi_schema import decode

    from ptebuild.store.entries import ENTRY_PATH

    folder = nginx.root / runner_a.remote.rsplit("/", 1)[1]
    names = sorted(p.name for p in (folder / "ac").iterdir())
    assert len(names) == 4  # two programs, each under its key and the key without the toolchain
    outputs_of_a = {name: hashlib.sha256(data).hexdigest() for name, data in runner_a.files().items()}
    for name in names:
        result = decode("ActionResult", (folder / "ac" / name).read_bytes())
        assert set(result) == {"output_files"}, result  # exit_code 0: omitted, as protoc omits it
        files = {f["path"]: (f["digest"]["hash"], int(f["digest"]["size_bytes"])) for f in result["output_files"]}
        for path, (digest, size) in files.items():  # every blob it names is in the CAS, whole
            data = (folder / "cas" / digest).read_bytes()
            assert (hashlib.sha256(data).hexdigest(), len(data)) == (digest, size), path
        envelope = json.loads((folder / "cas" / files.pop(ENTRY_PATH)[0]).read_bytes())
        assert name == hashlib.sha256(b"ptebuild action " + envelope["key"].encode()).hexdigest()
        assert {path: digest for path, (digest, _) in files.items()} == {
            o["name"]: o["sha256"] for o in envelope["document"]["outputs"]}
        assert all(outputs_of_a[path] == digest for path, (digest, _) in files.items())
