"""The Ray executor on a real local Ray cluster on loopback: a head (2 CPUs) and nodes that
declare a GPU they do not have, for placement. Only the processes these tests start are stopped."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import helpers
import pytest
from project_copy import copy_project

ray = helpers.require_module("ray", "pip install 'ptebuild[ray]' (./bootstrap.sh --test installs it)")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tasks_for_tests import cli_build, local_reference, make_tasks, slow_on_first_attempt, stored, wait_for

from ptebuild.builder.executors.ray import RayExecutor, ray_options
from ptebuild.worker.tasks import EventKind

RAY = str(Path(sys.executable).with_name("ray"))
# One Ray cluster at a time on this machine: under pytest-xdist, the Ray modules run on one worker.
pytestmark = pytest.mark.xdist_group("ray")

RAY_ENV = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    # Notice a killed node in about two seconds rather than the default half minute.
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "500",
    "RAY_health_check_failure_threshold": "3",
}


def free_port() -> int:
    return helpers.free_port("127.0.0.2")


LOOPBACK = "127.0.0.2"
"""Ray 2.60 replaces 127.0.0.1 by the machine's network address, and takes 127.0.0.2 (loopback
too on Linux) as given: the cluster's traffic never leaves the loopback interface."""


class Cluster:
    """``ray start --block`` processes, each in its own process group so that it can be killed whole."""

    def __init__(self, temp_dir: str):
        self.port = free_port()
        self.address = f"{LOOPBACK}:{self.port}"
        self.temp_dir = temp_dir
        self.env = {**os.environ, **RAY_ENV}
        self.processes: list[subprocess.Popen] = []

    def _start(self, *args: str) -> subprocess.Popen:
        process = subprocess.Popen(
            [RAY, "start", "--block", "--node-ip-address", LOOPBACK, "--disable-usage-stats", *args],
            env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def start_head(self) -> None:
        self._start("--head", "--port", str(self.port), "--num-cpus", "2", "--include-dashboard=false",
                    "--temp-dir", self.temp_dir)

    def add_gpu_node(self) -> tuple[subprocess.Popen, str]:
        """A node with 1 CPU and 1 (declared) GPU; returns it and its Ray node id once it is alive."""
        known = {n["NodeID"] for n in ray.nodes()}
        process = self._start("--address", self.address, "--num-cpus", "1", "--num-gpus", "1")
        node = wait_for(
            lambda: next((n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] not in known), None),
            60, "the GPU node to join",
        )
        return process, node

    def kill(self, process: subprocess.Popen) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def stop(self) -> None:
        """Kill the process groups these tests started, and nothing else (``ray stop`` would end
        every Ray process of the user)."""
        for process in reversed(self.processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster():
    saved = {k: os.environ.get(k) for k in RAY_ENV}
    os.environ.update(RAY_ENV)
    temp_dir = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # Ray's socket paths must stay short
    cluster = Cluster(temp_dir)
    try:
        cluster.start_head()
        deadline = time.monotonic() + 60
        while True:
            try:
                ray.init(address=cluster.address, configure_logging=False, log_to_driver=False,
                         _node_ip_address=LOOPBACK)
                break
            except Exception:  # the head is not up yet
                assert time.monotonic() < deadline, "the Ray head did not start"
                time.sleep(0.5)
        cluster.gpu_node = cluster.add_gpu_node()
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        cluster.stop()
        import shutil

        shutil.rmtree(temp_dir, ignore_errors=True)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_an_unreachable_cluster_is_one_line_at_once():
    from ptebuild.errors import BuildError

    address = f"{LOOPBACK}:{free_port()}"  # nothing listens there any more
    started = time.monotonic()
    with pytest.raises(BuildError, match=rf"^--executor ray: cannot connect to the Ray cluster at {address}: "):
        RayExecutor(jobs=1, address=address).submit(None)
    assert time.monotonic() - started < 15


def test_a_cuda_task_lands_only_on_the_node_that_declares_a_gpu(cluster, tmp_path):
    manifest = copy_project(tmp_path / "project")
    task = make_tasks(manifest, None)["tiny_portable"]
    cuda = replace(task, resources={"num_gpus": 1})  # what a CUDA program's task asks for
    options = ray_options(cuda)
    assert options["num_gpus"] == 1 and options["max_retries"] == 2

    def where() -> str:  # defined here, so that Ray ships it by value
        time.sleep(0.2)  # long enough that the tasks spread over the nodes, if they could
        return ray.get_runtime_context().get_node_id()

    remote = ray.remote(where)
    gpu_nodes = ray.get([remote.options(**options).remote() for _ in range(4)])
    assert set(gpu_nodes) == {cluster.gpu_node[1]}
    cpu_nodes = ray.get([remote.options(**ray_options(task)).remote() for _ in range(6)])
    assert "num_gpus" not in ray_options(task)
    assert len(set(cpu_nodes)) >= 1
    assert ray_options(replace(task, resources={"memory": "1GiB"}))["memory"] == 1 << 30


@pytest.mark.slow
def test_a_node_killed_mid_task_is_retried_elsewhere_and_fails_only_that_program(cluster, tmp_path):
    manifest = copy_project(tmp_path / "project")
    marker = tmp_path / "first-attempt"
    slow_on_first_attempt(manifest, marker)
    tasks = make_tasks(manifest, None)
    on_gpu = replace(tasks["tiny_portable"], resources={"num_gpus": 1})

    def finish(executor, count: int, kill_when_started=None) -> dict:
        finals = {}
        deadline = time.monotonic() + 180
        while len(finals) < count:
            assert time.monotonic() < deadline, f"finished: {sorted(finals)}"
            for event in executor.poll(0.1):
                if event.kind in (EventKind.DONE, EventKind.FAILED):
                    finals[event.task_id] = event
            if kill_when_started is not None and marker.exists():
                kill_when_started()
                kill_when_started = None
        return finals

    def replace_gpu_node():
        cluster.kill(cluster.gpu_node[0])  # the node dies with the task on it
        cluster.gpu_node = cluster.add_gpu_node()  # somewhere for the retry to go

    executor = RayExecutor(jobs=2, address=cluster.address, max_retries=1)
    try:
        executor.submit(on_gpu)
        [event] = finish(executor, 1, kill_when_started=replace_gpu_node).values()
    finally:
        executor.close()
    assert event.kind is EventKind.DONE, event.text
    result = event.result  # sent to the builder's store by digest, as from a node that shares no disk with it
    for output in result.outputs:
        assert hashlib.sha256(stored(on_gpu, output).read_bytes()).hexdigest() == output.sha256
    assert result.node.endswith(f"({cluster.gpu_node[1][:12]})")  # built by the retry, on the new node
    assert ray.is_initialized()  # the executor did not own the driver's connection: it left it

    # Without retries left, only the program on the lost node fails, with one line.
    marker.unlink()
    executor = RayExecutor(jobs=2, address=cluster.address, max_retries=0)
    try:
        executor.submit(on_gpu)
        executor.submit(tasks["tiny_xnnpack"])
        finals = finish(executor, 2, kill_when_started=lambda: cluster.kill(cluster.gpu_node[0]))
    finally:
        executor.close()
    assert finals["tiny_xnnpack"].kind is EventKind.DONE, finals["tiny_xnnpack"].text
    failed = finals["tiny_portable"]
    assert failed.kind is EventKind.FAILED
    assert "the Ray worker or node running it was lost" in failed.text and "\n" not in failed.text


def test_cancel_stops_a_running_task_at_once(cluster, tmp_path):
    manifest = copy_project(tmp_path / "project")
    marker = tmp_path / "started"
    slow_on_first_attempt(manifest, marker, seconds=120)
    task = make_tasks(manifest, None)["tiny_portable"]
    executor = RayExecutor(jobs=1, address=cluster.address)
    try:
        executor.submit(task)
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert time.monotonic() < deadline, "the task never started"
            executor.poll(0.1)
        worker = int(marker.read_text())
        cancelled = time.monotonic()
        executor.cancel(task.task_id)  # what Ctrl-C does to every task, through close(graceful=False)
        final = None
        while final is None:
            assert time.monotonic() - cancelled < 30, "the cancelled task did not end"
            final = next((e for e in executor.poll(0.1) if e.kind in (EventKind.DONE, EventKind.FAILED)), None)
    finally:
        executor.close(graceful=False)
    assert final.kind is EventKind.FAILED and final.text == "cancelled"
    wait_for(lambda: not Path(f"/proc/{worker}").exists(), 15, "the worker process running it to be killed")


@pytest.mark.slow
def test_the_cli_build_on_the_cluster_equals_a_local_build(cluster, tmp_path, tmp_path_factory):
    manifest, expected = local_reference(tmp_path_factory.getbasetemp())
    built = cli_build(manifest, tmp_path / "out", "--executor", "ray", "--no-cache",
                      env={**RAY_ENV, "RAY_ADDRESS": cluster.address})
    assert built == expected
    # The folders of the tasks killed with their node earlier were swept by the tasks since.
    from ptebuild.builder.executors.ray import TASK_FOLDER_PREFIX

    left = [f.name for f in Path(tempfile.gettempdir()).glob(f"{TASK_FOLDER_PREFIX}*")
            if not Path("/proc", f.name[len(TASK_FOLDER_PREFIX):].partition("-")[0]).exists()]
    assert left == []


# Slow: the remote cache through Ray's nodes (20 s); the local pool's remote-cache builds (tests/remote) and this module's scheduling tests stay in the default run.
@pytest.mark.slow
def test_ray_nodes_look_up_and_store_their_results_in_the_remote_cache(cluster, nginx, tmp_path):
    """Runner A builds on the cluster: its nodes lower and upload, its driver only fetches the
    files it publishes. Runner B's nodes find every program there (nothing lowered, nothing
    uploaded); its driver fetches the files, the same bytes, and nothing else."""
    import json
    import uuid

    from helpers import build_json, ptebuild

    prefix = f"ray-{uuid.uuid4().hex[:8]}"
    url = f"{nginx.url}/{prefix}"

    def requests() -> list[str]:
        return [line for line in nginx.requests() if f" /{prefix}/" in line]

    def build(name: str) -> tuple[dict, dict, dict[str, bytes]]:
        manifest = copy_project(tmp_path / name / "project")
        out = manifest.parent / "out"
        code, report = build_json(str(manifest), "--executor", "ray", "--cache", str(tmp_path / name / "cache"),
                                  "--remote-cache", url, env={**RAY_ENV, "RAY_ADDRESS": cluster.address})
        assert code == 0, report
        stats = ptebuild("cache", "stats", "--cache", str(tmp_path / name / "cache"), "--json")
        (remote,) = json.loads(stats.stdout)["last_build_remote"].values()
        return report, remote, {p.name: p.read_bytes() for p in sorted(out.glob("*.pt[ed]"))}

    report_a, driver_a, files_a = build("a")
    assert [p["status"] for p in report_a["targets"]] == ["built", "built"]
    assert all(p["node"].endswith(")") for p in report_a["targets"]), report_a  # "host (ray node id)"
    # A's nodes uploaded (files, envelopes, entries); its driver uploaded nothing and read no entry.
    assert len([r for r in requests() if r.startswith("PUT") and "/ac/" in r]) == 4  # each key, and without the toolchain
    assert (driver_a["uploads"], driver_a["bytes_up"], driver_a["hits"], driver_a["misses"]) == (0, 0, 0, 0), driver_a
    assert (driver_a["downloads"], driver_a["bytes_down"]) == (4, sum(len(d) for d in files_a.values())), driver_a

    before = len(requests())
    report_b, driver_b, files_b = build("b")
    during_b = requests()[before:]
    assert [(p["status"], p.get("source")) for p in report_b["targets"]] == [("cached", "remote")] * 2
    assert files_b == files_a and len(files_b) == 4
    assert not [r for r in during_b if r.startswith("PUT")], during_b  # no node lowered anything
    assert len([r for r in during_b if r.startswith("GET") and "/ac/" in r and r.split()[2] == "200"]) >= 2  # the nodes found them
    assert (driver_b["uploads"], driver_b["bytes_up"], driver_b["hits"], driver_b["misses"]) == (0, 0, 0, 0), driver_b
    assert (driver_b["downloads"], driver_b["bytes_down"]) == (4, sum(len(d) for d in files_b.values())), driver_b
    # What the driver published is what it fetched: the GETs of the published files are in the log.
    gets = {r.split()[1].rsplit("/", 1)[1] for r in during_b if r.startswith("GET") and "/cas/" in r}
    assert {hashlib.sha256(d).hexdigest() for d in files_b.values()} <= gets


@pytest.mark.slow
def test_a_node_result_the_driver_cannot_fetch_is_lowered_again_inline(cluster, nginx, proxy, tmp_path):
    """Runner B's node finds the program, but B's driver cannot fetch its .pte (the server
    answers 500 for it alone): the task runs again without the cache, its bytes come back inline,
    and the build ends built, with A's bytes and a warning."""
    import uuid

    from helpers import build_json

    prefix = f"ray-again-{uuid.uuid4().hex[:8]}"

    def build(name: str, url: str) -> tuple[int, dict, dict[str, bytes]]:
        manifest = copy_project(tmp_path / name / "project")
        code, report = build_json(str(manifest), "--only", "tiny_portable", "--executor", "ray",
                                  "--cache", str(tmp_path / name / "cache"), "--remote-cache", url,
                                  env={**RAY_ENV, "RAY_ADDRESS": cluster.address})
        out = manifest.parent / "out"
        return code, report, {p.name: p.read_bytes() for p in sorted(out.glob("*.pt[ed]"))}

    code, report_a, files_a = build("a", f"{nginx.url}/{prefix}")
    assert code == 0 and report_a["targets"][0]["status"] == "built", report_a
    pte = hashlib.sha256(files_a["tiny_portable.pte"]).hexdigest()
    proxy.fault("status", code=500, match=f"/cas/{pte}", methods=["GET"])
    code, report_b, files_b = build("b", f"{proxy.origin}/{prefix}")
    assert code == 0 and files_b == files_a
    [program] = report_b["targets"]
    assert program["status"] == "built", program
    gets = [r for r in proxy.log() if r[0] == "GET" and r[1].endswith(f"/cas/{pte}")]
    assert gets and all(status == 500 for _, _, status, _ in gets)  # the .pte came inline the second time
