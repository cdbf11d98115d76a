"""Real builds sharing a real nginx: two runners, shards, and faults between a runner and the server.

"Runners" are separate project copies, local caches and output folders on one machine; the
remote cache is the session's nginx (WebDAV PUT), reached directly or through the fault proxy.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import ptebuild
from project_copy import copy_project

from ptebuild.store import Store

ONE = ("--only", "tiny_portable")


class Runner:
    def __init__(self, root: Path, remote: str):
        self.manifest = copy_project(root / "project")
        self.cache = root / "cache"
        self.out = self.manifest.parent / "out"
        self.remote = remote

    def build(self, *extra: str, remote: str | None = None, trace_imports: bool = False) -> tuple[dict, subprocess.CompletedProcess]:
        result = ptebuild(
            "build", str(self.manifest), "--cache", str(self.cache), "--remote-cache", remote or self.remote,
            "--json", *extra, trace_imports=trace_imports,
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout), result

    def files(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(self.out.iterdir()) if p.suffix in (".pte", ".ptd")}


def warnings(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("warning:")]


def heavy_imports(result: subprocess.CompletedProcess) -> set[str]:
    names = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    return {n for n in names if n.split(".")[0] in ("torch", "executorch")}


@pytest.fixture(scope="module")
def runner_a(nginx, tmp_path_factory):
    """Runner A built the whole tiny manifest and uploaded it."""
    import uuid

    url = f"{nginx.url}/build-{uuid.uuid4().hex[:8]}"
    runner = Runner(tmp_path_factory.mktemp("runner-a"), url)
    document, result = runner.build()
    assert {p["status"] for p in document["programs"]} == {"built"}
    assert warnings(result) == []
    return runner


def test_runner_b_restores_every_program_from_the_remote_without_lowering(runner_a, tmp_path):
    b = Runner(tmp_path / "b", runner_a.remote)
    document, result = b.build(trace_imports=True)
    assert [(p["status"], p.get("source")) for p in document["programs"]] == [("cached", "remote")] * 2
    assert heavy_imports(result) == set()  # no worker, no torch
    assert b.files() == runner_a.files()
    stats = ptebuild("cache", "stats", "--cache", str(b.cache), "--json")
    (remote,) = json.loads(stats.stdout)["last_build_remote"].values()
    assert remote["hits"] == 2 and remote["bytes_down"] >= sum(len(d) for d in b.files().values())
    # The remote hit was copied into B's local cache: the next build is local.
    again, _ = b.build("--remote-cache", "http://127.0.0.1:9/unused")
    assert [(p["status"], p.get("source")) for p in again["programs"]] == [("cached", "local")] * 2


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
    program = document["programs"][0]
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
        lowered += [p["name"] for p in document["programs"] if p["status"] == "built"]
    assert sorted(lowered) == ["tiny_portable", "tiny_xnnpack"]
    final = Runner(tmp_path / "final", url)
    document, result = final.build(trace_imports=True)
    assert [(p["status"], p.get("source")) for p in document["programs"]] == [("cached", "remote")] * 2
    assert heavy_imports(result) == set()


def test_remote_upload_no_reads_but_never_writes(runner_a, space, tmp_path):
    runner = Runner(tmp_path / "pr", space.url)
    document, _ = runner.build(*ONE, "--remote-upload=no")
    assert document["programs"][0]["status"] == "built"
    assert space.files() == []
