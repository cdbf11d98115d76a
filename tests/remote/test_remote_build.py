"""Real builds sharing a real remote cache: two runners, and faults between a runner and the server,
against both tiers (nginx for HTTP, BuildGrid for REAPI over gRPC); then, on nginx, shards,
read-only runners, shared weights and the entries' wire format.

"Runners" are separate project copies, local caches and output folders on one machine; the
remote cache is the session's server, reached directly or through its fault proxy
(``faultproxy.py``, ``grpcproxy.py``).
"""

from __future__ import annotations

import json
import uuid

import pytest
from helpers import ptebuild, require_module
from runners import Runner, heavy_imports, warnings

from ptebuild.store import Store

ONE = ("--only", "tiny_portable")
UNUSED = {"http": "http://127.0.0.1:9/unused", "grpc": "grpc://127.0.0.1:9"}
"""A remote cache of each kind that nobody answers at."""


@pytest.fixture(scope="module")
def runners_a(tmp_path_factory):
    """``runner_a(kind, request)``: runner A, which built the whole tiny manifest and uploaded it, to a
    path of its own on nginx or to BuildGrid (the session's, shared: keys of its own through a
    salt); built once per kind and module, when a test first asks."""
    made: dict[str, Runner] = {}

    def runner_a(kind: str, request: pytest.FixtureRequest) -> Runner:
        if kind not in made:
            if kind == "http":
                url, salt = f"{request.getfixturevalue('nginx').url}/build-{uuid.uuid4().hex[:8]}", ""
            else:
                require_module("grpc", "pip install 'ptebuild[grpc]' (./bootstrap.sh --test installs it)")
                url, salt = request.getfixturevalue("buildgrid").url, f"run {uuid.uuid4().hex}"
            runner = Runner(tmp_path_factory.mktemp(f"runner-a-{kind}"), url, salt)
            document, result = runner.build()
            assert {p["status"] for p in document["targets"]} == {"built"}
            assert warnings(result) == []
            stats = runner.remote_stats()
            assert stats["uploads"] == 8 and stats["errors"] == 0, stats  # 4 files, 4 entries (each key, and without the toolchain)
            made[kind] = runner
        return made[kind]

    return runner_a


@pytest.fixture(params=["http", "grpc"])
def runner_a(request, runners_a):
    return runners_a(request.param, request)


def kind_of(runner: Runner) -> str:
    return runner.remote.split(":", 1)[0]


def test_runner_b_restores_every_program_from_the_remote_without_lowering(runner_a, tmp_path):
    b = Runner(tmp_path / "b", runner_a.remote, runner_a.salt)
    document, result = b.build("--explain", trace_imports=True)
    assert [(p["status"], p.get("source")) for p in document["targets"]] == [("cached", "remote")] * 2, (
        warnings(result), [(p["key"], p.get("explain")) for p in document["targets"]])
    assert heavy_imports(result) == set()  # no worker, no torch: nothing lowered
    assert warnings(result) == []
    assert b.files() == runner_a.files() and len(b.files()) == 4
    remote = b.remote_stats()
    assert (remote["hits"], remote["downloads"], remote["uploads"], remote["errors"]) == (2, 4, 0, 0), remote
    assert remote["bytes_down"] >= sum(len(d) for d in b.files().values())
    # The remote hit was copied into B's local cache: the next build is local.
    again, _ = b.build("--remote-cache", UNUSED[kind_of(runner_a)])
    assert [(p["status"], p.get("source")) for p in again["targets"]] == [("cached", "local")] * 2


def _http(runner_a, request):
    proxy = request.getfixturevalue("proxy")
    return proxy, f"{proxy.origin}/{runner_a.remote.split('/', 3)[3]}"


def _grpc(runner_a, request):
    proxy = request.getfixturevalue("grpc_proxy")
    return proxy, proxy.url


FAULTS = [
    ("http", "flipped byte", lambda proxy: proxy.fault("flip", match="/cas/", methods=["GET"])),
    ("http", "500s", lambda proxy: proxy.fault("status", code=500)),
    ("http", "server gone mid-build", lambda proxy: proxy.die_after(1)),
    ("grpc", "flipped byte", lambda proxy: proxy.fault("flip", match="BatchReadBlobs")),
    ("grpc", "server gone mid-build", lambda proxy: proxy.die_after(1)),  # UNAVAILABLE answers: tests/store/test_grpc.py
]


@pytest.mark.parametrize(("kind", "fault", "arm"), FAULTS, ids=[f"{kind}-{fault}" for kind, fault, _ in FAULTS])
def test_faults_never_fail_the_build_nor_poison_the_local_cache(runners_a, request, tmp_path, kind, fault, arm):
    runner_a = runners_a(kind, request)
    proxy, url = (_http if kind == "http" else _grpc)(runner_a, request)
    b = Runner(tmp_path / "b", url, runner_a.salt)
    arm(proxy)
    document, result = b.build(*ONE)
    program = document["targets"][0]
    assert program["status"] in ("built", "cached"), fault
    assert len(warnings(result)) >= 1, fault
    assert all(w.startswith(f"warning: remote cache {url}") for w in warnings(result)), warnings(result)
    # Whatever happened, the output is A's exact bytes (lowering is deterministic) ...
    expected = {n: d for n, d in runner_a.files().items() if n.startswith("tiny_portable")}
    assert b.files() == expected, fault
    # ... and nothing wrong reached B's local cache.
    report = Store(b.cache).verify()
    assert report.ok, fault


# --- on nginx ------------------------------------------------------------------------------------


# Slow: shards through a remote cache (10 s); tests/builder/test_build.py's shards test is its fast sibling.
@pytest.mark.slow
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


def test_remote_upload_no_reads_but_never_writes(space, tmp_path):
    runner = Runner(tmp_path / "pr", space.url)
    document, _ = runner.build(*ONE, "--remote-upload=no")
    assert document["targets"][0]["status"] == "built"
    assert space.files() == []


# Slow: a shared weights group restored from a remote (10 s); runner B's restore above stays in the default run.
@pytest.mark.slow
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


def test_the_entries_of_a_build_are_reapi_action_results(runners_a, request, nginx):
    """What a validating server (bazel-remote) asks of an /ac/ upload: an ActionResult, here read
    by the protobuf library against the REAPI schema, whose blobs are all in the CAS."""
    import hashlib

    from reapi_schema import decode

    from ptebuild.store.entries import ENTRY_PATH

    runner_a = runners_a("http", request)
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
