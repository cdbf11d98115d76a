"""Real builds through a real BuildGrid (REAPI over gRPC, the session's): runner A builds, runner
B restores without lowering, the same bytes; and the HTTP tier's build fault tests, through the
gRPC proxy (``grpcproxy.py``)."""

from __future__ import annotations

import uuid

import pytest
from helpers import require_module
from runners import Runner, heavy_imports, warnings

from ptebuild.store import Store

require_module("grpc", "pip install 'ptebuild[grpc]' (./bootstrap.sh --test installs it)")

ONE = ("--only", "tiny_portable")


@pytest.fixture(scope="module")
def grpc_runner_a(buildgrid, tmp_path_factory):
    """Runner A built the whole tiny manifest (keys of its own: a salt) and uploaded it to BuildGrid."""
    salt = f"run {uuid.uuid4().hex}"
    runner = Runner(tmp_path_factory.mktemp("grpc-runner-a"), buildgrid.url, salt)
    document, result = runner.build()
    assert {p["status"] for p in document["targets"]} == {"built"}
    assert warnings(result) == []
    stats = runner.remote_stats()
    assert stats["uploads"] == 8 and stats["errors"] == 0, stats  # 4 files, 4 entries (each key, and without the toolchain)
    return runner, salt


def test_runner_a_builds_through_buildgrid_and_runner_b_restores_without_lowering(grpc_runner_a, tmp_path):
    a, salt = grpc_runner_a
    b = Runner(tmp_path / "b", a.remote, salt)
    document, result = b.build("--explain", trace_imports=True)
    assert [(p["status"], p.get("source")) for p in document["targets"]] == [("cached", "remote")] * 2, (
        warnings(result), [(p["key"], p.get("explain")) for p in document["targets"]])
    assert heavy_imports(result) == set()  # no worker, no torch: nothing lowered
    assert warnings(result) == []
    assert b.files() == a.files() and len(b.files()) == 4
    remote = b.remote_stats()
    assert (remote["hits"], remote["downloads"], remote["uploads"], remote["errors"]) == (2, 4, 0, 0), remote
    assert remote["bytes_down"] >= sum(len(d) for d in b.files().values())
    # The remote hit was copied into B's local cache: the next build is local.
    again, _ = b.build("--remote-cache", "grpc://127.0.0.1:9")
    assert [(p["status"], p.get("source")) for p in again["targets"]] == [("cached", "local")] * 2


@pytest.mark.parametrize(
    ("fault", "arm"),
    [
        ("flipped byte", lambda proxy: proxy.fault("flip", match="BatchReadBlobs")),
        ("server gone mid-build", lambda proxy: proxy.die_after(1)),  # UNAVAILABLE answers: tests/store/test_grpc.py
    ],
)
def test_faults_never_fail_the_build_nor_poison_the_local_cache(grpc_runner_a, grpc_proxy, tmp_path, fault, arm):
    a, salt = grpc_runner_a
    b = Runner(tmp_path / "b", grpc_proxy.url, salt)
    arm(grpc_proxy)
    document, result = b.build(*ONE)
    program = document["targets"][0]
    assert program["status"] in ("built", "cached"), fault
    assert len(warnings(result)) >= 1, fault
    assert all(w.startswith(f"warning: remote cache {grpc_proxy.url}") for w in warnings(result)), warnings(result)
    # Whatever happened, the output is A's exact bytes (lowering is deterministic) ...
    expected = {n: d for n, d in a.files().items() if n.startswith("tiny_portable")}
    assert b.files() == expected, fault
    # ... and nothing wrong reached B's local cache.
    assert Store(b.cache).verify().ok, fault
