"""Workers that share a machine share its cores: with N workers each task runs torch on cores / N
threads (at least one), not every worker on all of them (2 workers x 2 threads on 2 cores measured
4 % slower on robot.toml's cold build; 16 workers x 16 threads on 16 cores far worse). One worker, or
a thread count the user set (``OMP_NUM_THREADS``), is left as torch sets it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import THP_ELIGIBLE, transparent_huge_pages
from project_copy import copy_project
from tasks_for_tests import make_tasks, run_all
from test_daemon import stop_servers

from ptebuild.builder.executors.daemon import DaemonExecutor
from ptebuild.builder.executors.local import LocalExecutor
from ptebuild.worker.tasks import EventKind, threads_per_worker


def _recording_project(root: Path) -> Path:
    """tiny.toml whose model factory writes the torch threads it was built with into $TINY_THREADS_DIR, and
    whether the kernel gives an 8 MiB tensor of its worker huge pages (smaps' ``THPeligible``) into ``huge_pages``."""
    manifest = copy_project(root)
    model = root / "tinymodels" / "tiny.py"
    model.write_text(model.read_text().replace(
        "def make_tiny(**kwargs) -> Tiny:\n",
        THP_ELIGIBLE + "\n\n"
        "def make_tiny(**kwargs) -> Tiny:\n"
        "    import os, torch, uuid\n"
        "    folder = os.environ['TINY_THREADS_DIR']\n"
        "    with open(os.path.join(folder, uuid.uuid4().hex), 'w') as f:\n"
        "        f.write(str(torch.get_num_threads()))\n"
        "    tensor = torch.ones(8 << 20, dtype=torch.uint8)\n"
        "    with open(os.path.join(folder, 'huge_pages'), 'w') as f:\n"
        "        f.write(thp_eligible(tensor.data_ptr()))\n",
    ))
    return manifest


def test_the_share_of_the_cores():
    assert threads_per_worker(workers=2, cores=2, environment={}) == 1
    assert threads_per_worker(workers=4, cores=16, environment={}) == 4
    assert threads_per_worker(workers=3, cores=2, environment={}) == 1
    assert threads_per_worker(workers=1, cores=16, environment={}) == 0  # torch's own choice
    assert threads_per_worker(workers=4, cores=16, environment={"OMP_NUM_THREADS": "3"}) == 0  # the user's


def _threads_seen(tmp_path: Path, monkeypatch, executor: str, jobs: int) -> set[int]:
    """The torch thread count tiny.toml's portable program was built with by ``jobs`` workers of ``executor``."""
    recorded = tmp_path / "threads"
    recorded.mkdir()
    monkeypatch.setenv("TINY_THREADS_DIR", str(recorded))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    every = make_tasks(_recording_project(tmp_path / "project"), tmp_path / "store")
    tasks = {"tiny_portable": every["tiny_portable"]}  # the share is the executor's, whatever it runs
    cache = tmp_path / "cache"
    runs = LocalExecutor(jobs=jobs) if executor == "local" else DaemonExecutor(jobs=jobs, cache_dir=cache)
    try:
        finals = run_all(runs, tasks)
    finally:
        runs.close()
        stop_servers(cache)
    assert all(final.kind is EventKind.DONE for final in finals.values()), [f.text for f in finals.values()]
    if transparent_huge_pages() == "madvise":  # torch's allocator asks for them (ptebuild.heap), the kernel gives them
        assert (recorded / "huge_pages").read_text() == "1"
    return {int(p.read_text()) for p in recorded.iterdir() if p.name != "huge_pages"}


# The local pool runs the same worker code (execute.py applies the share either way): slow.
@pytest.mark.parametrize("executor", [pytest.param("local", marks=pytest.mark.slow), "daemon"])
def test_each_of_two_workers_runs_torch_on_its_share_of_the_cores(executor, tmp_path, monkeypatch):
    cores = len(os.sched_getaffinity(0))
    assert _threads_seen(tmp_path, monkeypatch, executor, jobs=2) == {max(1, cores // 2)}
