"""Lowering interpreters hash strings with one fixed seed, whatever the build's own was."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from project_copy import copy_project

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tasks_for_tests import make_tasks, run_all

from ptebuild.builder.executors.daemon import DaemonExecutor
from ptebuild.builder.executors.local import LocalExecutor
from ptebuild.processes import WORKER_HASH_SEED, worker_environment
from ptebuild.worker.tasks import EventKind

PROBE = "ptebuild-hash-seed-probe"


def hash_with_seed(seed: str) -> int:
    done = subprocess.run([sys.executable, "-c", f"print(hash({PROBE!r}))"], capture_output=True, text=True,
                          env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}, check=True)
    return int(done.stdout)


def seed_checking_project(tmp_path: Path) -> Path:
    """The tiny project, whose model refuses to be built unless strings hash as under seed 0."""
    manifest = copy_project(tmp_path / "project")
    model = manifest.parent / "tinymodels" / "tiny.py"
    model.write_text(model.read_text().replace(
        "def make_tiny(**kwargs) -> Tiny:\n",
        "def make_tiny(**kwargs) -> Tiny:\n"
        f"    if hash({PROBE!r}) != {hash_with_seed(WORKER_HASH_SEED)}:\n"
        "        raise RuntimeError('this interpreter hashes strings with another seed')\n",
    ))
    return manifest


def test_an_explicit_seed_wins():
    assert worker_environment({})["PYTHONHASHSEED"] == WORKER_HASH_SEED
    assert worker_environment({"PYTHONHASHSEED": "7"})["PYTHONHASHSEED"] == "7"  # build --reproduce


# The warm server's two cases are slow (7 and 11 s): "local" is their fast sibling; the warm
# server's environment is also tested in tests/executors/test_daemon.py.
@pytest.mark.parametrize("executor", ["local", *(pytest.param(e, marks=pytest.mark.slow) for e in ("daemon", "daemon-fresh"))])
def test_workers_hash_with_the_fixed_seed(executor, tmp_path, monkeypatch):
    manifest = seed_checking_project(tmp_path)
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    if executor == "local":
        pool = LocalExecutor(jobs=1)
    else:  # a new server: forked children take its seed, fresh interpreters their own
        if executor == "daemon-fresh":
            monkeypatch.setenv("PTEBUILD_DAEMON_FRESH", "1")
        pool = DaemonExecutor(jobs=1, cache_dir=tmp_path / "cache", idle=5)
    try:
        task = make_tasks(manifest, tmp_path / "staging")["tiny_portable"]
        final = run_all(pool, {task.task_id: task})[task.task_id]
    finally:
        pool.close()
    assert final.kind is EventKind.DONE, final.text
