"""A warm server's task children: forked from the warm process, or a fresh interpreter.

A forked child shares the imported toolchain copy-on-write and starts from the module cache of a
process that never imported user code; a task whose backend does not survive ``fork()``
(:func:`needs_fresh_interpreter`) runs in ``python -m ptebuild.daemon.fresh_child`` instead.
Either way the child runs the task in the build's working folder and environment
(:func:`run_child`) and reports on a pipe with the protocol's framing; it dies with the server.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptebuild.daemon import protocol
from ptebuild.processes import env_flag, worker_environment

if TYPE_CHECKING:
    import subprocess


def default_max_rss() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.8)
    except (ValueError, OSError):
        return 16 << 30


def fork_is_safe() -> str | None:
    """None if this process may fork task children, else why not: a thread (a Python one, or a
    native one started since the imports, such as OpenMP's pool: a child forked over it hangs in
    its first parallel work) or CUDA."""
    if threading.active_count() > 1:
        return f"{threading.active_count()} Python threads are running"
    started, now = _threads_at_start_count(), native_threads()
    if started is not None and now is not None and now > started:
        return f"{now} native threads are running, {started} after the imports (torch ran parallel work)"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA is initialised"
    return None


def native_threads() -> int | None:
    """The number of this process's threads, Python's and native ones (``/proc/self/task``);
    None where the system does not list them."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


_threads_at_start: list[int | None] = []
"""The native threads of the warm process before it ran anything (its imports' own: the idle
thread ``import torch`` starts), counted by the first :func:`fork_is_safe` or
:func:`warm_before_forking`."""


def _threads_at_start_count() -> int | None:
    if not _threads_at_start:
        _threads_at_start.append(native_threads())
    return _threads_at_start[0]


def warm_before_forking() -> list[str]:
    """Do once, in the warm process, what each task child would otherwise do again: every backend
    the workers import (:data:`~ptebuild.worker.execute.PREPARED_BACKENDS`) that survives a fork
    runs its :meth:`~ptebuild.backends.base.Backend.warm`, with torch on one thread (OpenMP starts
    no pool for work on one thread) and tqdm's monitor thread off, torch's thread count restored
    after. Returns one line per warm-up that failed (it only costs the children time)."""
    import torch

    from ptebuild.backends import get_backend
    from ptebuild.causes import describe
    from ptebuild.worker.execute import PREPARED_BACKENDS

    _threads_at_start_count()
    problems: list[str] = []
    threads = torch.get_num_threads()
    tqdm = _tqdm()
    monitor = tqdm.monitor_interval if tqdm is not None else 0
    torch.set_num_threads(1)
    try:
        if tqdm is not None:
            tqdm.monitor_interval = 0
        for name in PREPARED_BACKENDS:
            backend = get_backend(name)
            if backend.forks_safely:
                try:
                    backend.warm()
                except Exception as exc:  # an optimisation: the children do it themselves
                    problems.append(f"warming the {name} backend failed: {describe(exc).line}")
    finally:
        torch.set_num_threads(threads)
        if tqdm is not None:
            tqdm.monitor_interval = monitor
    return problems


def _tqdm() -> Any:
    """tqdm's progress bar class, if installed (upstream's passes show bars: each starts tqdm's
    monitor thread unless its ``monitor_interval`` is 0)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


def sweep_log_dirs(folder: Path) -> None:
    """Remove the children's log folders of servers that died without cleaning up (``kill -9``)."""
    import shutil

    for log_dir in folder.glob("children-*"):
        pid = log_dir.name.split("-")[1]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(log_dir, ignore_errors=True)
        except PermissionError:
            pass


def needs_fresh_interpreter(task: dict[str, Any]) -> bool:
    """True if ``task`` must not run in a forked child (its backend, or ``PTEBUILD_DAEMON_FRESH``)."""
    if env_flag("PTEBUILD_DAEMON_FRESH"):
        return True
    from ptebuild.backends import backend_names, get_backend

    plan = task.get("plan")
    name = plan.get("backend") if isinstance(plan, dict) else None  # Task.to_json(): the program's own plan
    return name in backend_names() and not get_backend(name).forks_safely


def spawn_fresh(submit: dict[str, Any], pipe: int, log_fd: int, folder: Path) -> subprocess.Popen[bytes]:
    """Start ``python -m ptebuild.daemon.fresh_child`` for ``submit``, reporting on ``pipe``."""
    import json
    import subprocess

    fd, submit_path = tempfile.mkstemp(prefix="submit-", suffix=".json", dir=folder)
    with os.fdopen(fd, "w") as out:
        json.dump(submit, out)
    given = submit.get("env")
    env = worker_environment(given if isinstance(given, dict) else os.environ)
    command = [sys.executable, "-m", "ptebuild.daemon.fresh_child",
               "--submit", submit_path, "--pipe", str(pipe), "--parent", str(os.getpid())]
    try:
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, pass_fds=(pipe,),
            cwd=submit.get("cwd") or "/", env={str(k): str(v) for k, v in env.items()},
        )
    except OSError:
        os.unlink(submit_path)  # the child would have removed it
        raise


def run_child(submit: dict[str, Any], pipe: int) -> int:
    """In a child (forked, or a fresh interpreter): run one task, report on ``pipe``; return the exit code.

    The child takes the build's working folder and environment (model code may read either), as a
    worker process of the local executor would have; what torch read from the environment when it
    was imported stays as the server's first build had it.
    """
    from ptebuild.worker.execute import execute
    from ptebuild.worker.tasks import StagedProgress, Task, TaskFailure

    if isinstance(submit.get("env"), dict):
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in submit["env"].items()})
    with contextlib.suppress(OSError, TypeError):
        os.chdir(submit.get("cwd") or "/")
    task_json = submit["task"]

    def write_all(message: dict[str, Any]) -> None:
        data = memoryview(protocol.encode(message))
        while data:
            data = data[os.write(pipe, data):]

    task = Task.from_json(task_json)
    progress = StagedProgress(lambda text, stage: write_all({"op": "progress", "text": str(text), "stage": stage}),
                              stored=lambda outputs: write_all({"op": "stored", "outputs": [o.to_json() for o in outputs]}))
    outcome = execute(task, progress)
    if isinstance(outcome, TaskFailure):
        write_all({"op": "failed", "failure": outcome.to_json()})
    else:
        write_all({"op": "done", "result": outcome.to_json()})
    return 0
