"""The worker process: imports torch and executorch once, then lowers and checks programs.

Protocol over a :func:`multiprocessing.Pipe` (pickled tuples):

- parent -> worker: ``("lower", task)`` with ``task`` a dict (plan JSON, program name, staging
  folder), or ``("stop",)``;
- worker -> parent: ``("ready",)`` once imports are done; ``("progress", text)`` while working;
  ``("done", result)`` or ``("failed", kind, message)`` at the end of each task, where ``kind`` is
  ``"manifest"`` (the user must fix the manifest or the model code) or ``"build"``.

A worker that dies (segfault, out of memory, SIGKILL) simply closes its end of the pipe: the
parent fails the one task it was running.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
import warnings
from pathlib import Path

from ptebuild.errors import ManifestError, PtebuildError


def _quiet_imports() -> None:
    """Import torch and executorch once, with their import-time chatter silenced."""
    warnings.filterwarnings("ignore")
    import logging

    logging.disable(logging.WARNING)
    from ptebuild.builder.check import native_stderr_silenced

    with native_stderr_silenced():  # torchao/executorch native code prints to fd 2 on import
        import torch  # noqa: F401
        import executorch.exir  # noqa: F401
        import executorch.runtime  # noqa: F401


def run_task(task: dict, progress) -> dict:
    from ptebuild.backends import get_backend
    from ptebuild.builder.examples import make_inputs
    from ptebuild.builder.lowering import lower
    from ptebuild.builder.model_loading import build_model
    from ptebuild.manifest.plan import BuildPlan

    started = time.monotonic()
    plan = BuildPlan.from_json(task["plan"], manifest=task["manifest"], manifest_dir=task["manifest_dir"])
    program = next(p for p in plan.programs if p.name == task["program"])
    manifest_dir = Path(plan.manifest_dir)
    progress("building the model")
    model = build_model(program, manifest_dir, plan.manifest)
    inputs = {m.name: make_inputs(m, program.seed) for m in program.methods}
    lowered = lower(model, program, inputs, Path(task["staging"]), progress)
    lowered_at = time.monotonic()
    figures = []
    if program.check_enabled:
        progress("checking against eager PyTorch")
        ptd = lowered.files.get(program.ptd_name) if program.ptd_name else None
        backend = get_backend(program.backend)
        checked, check_name = backend.check(model, program, lowered.files[program.pte_name], ptd)
        figures = [f.to_json() for f in checked]
    return {
        "files": {name: str(path) for name, path in lowered.files.items()},
        "figures": figures,
        "delegates": lowered.delegated,
        "lower_seconds": lowered_at - started,
        "check_seconds": time.monotonic() - lowered_at,
    }


def _redirect_output(log_path: str) -> None:
    """Send the worker's stdout and stderr (fd 1 and 2) to its log file.

    Native code in torch, XNNPACK and cpuinfo prints probe chatter there; the parent shows the
    log's last lines only if the worker crashes.
    """
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _die_with_parent() -> None:
    """Ask Linux to kill this worker when the ptebuild process that started it dies.

    Without it, a ``kill -9`` of ptebuild would leave workers lowering for nobody.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)


def worker_main(conn, log_path: str | None = None) -> None:
    """Entry point of a worker process."""
    _die_with_parent()
    if log_path:
        _redirect_output(log_path)
    try:
        _quiet_imports()
    except BaseException as exc:  # report, then die: the parent fails the task
        conn.send(("failed", "build", f"the worker cannot import torch/executorch: {exc}"))
        return
    conn.send(("ready",))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message[0] == "stop":
            return
        task = message[1]
        try:
            result = run_task(task, lambda text: conn.send(("progress", text)))
        except ManifestError as exc:
            conn.send(("failed", "manifest", str(exc)))
        except PtebuildError as exc:
            conn.send(("failed", "build", str(exc)))
        except Exception as exc:  # the model's code or the toolchain: keep the worker alive
            detail = traceback.format_exc() if task.get("debug") else ""
            conn.send(("failed", "build", f"{type(exc).__name__}: {exc}".strip() + (f"\n{detail}" if detail else "")))
        else:
            conn.send(("done", result))
