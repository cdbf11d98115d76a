"""The worker process: imports torch and executorch once, then lowers and checks programs.

Protocol over a :func:`multiprocessing.Pipe` (pickled tuples):

- parent -> worker: ``("lower", task)`` with ``task`` a :class:`~ptebuild.builder.tasks.Task` as
  JSON, or ``("stop",)``;
- worker -> parent: ``("ready",)`` once imports are done; ``("progress", text)`` while working;
  ``("done", TaskResult)`` or ``("failed", kind, message)`` at the end of each task, where ``kind``
  is ``"manifest"`` (the user must fix the manifest or the model code) or ``"build"``.

:func:`prepare_worker`, :func:`run_task` and :func:`execute` are the worker side of every
executor (a local pool, a warm server, a Ray task).

A worker that dies (segfault, out of memory, SIGKILL) simply closes its end of the pipe: the
parent fails the one task it was running.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

from ptebuild.builder import imported
from ptebuild.builder.tasks import Task, TaskResult
from ptebuild.errors import BuildError, ManifestError, PtebuildError, StaleWorker
from ptebuild.results import OutputFile

_baseline: frozenset[str] = frozenset()
_imported: dict[str, imported.ImportedDist] = {}
"""The distributions this process has imported, as installed when it did (:mod:`.imported`)."""
_attributed: set[str] = set()
"""The modules whose distributions :data:`_imported` already accounts for."""


def prepare_worker() -> None:
    """Import torch and executorch once, quietly, and remember which modules a task starts with."""
    global _baseline
    warnings.filterwarnings("ignore")
    import logging

    logging.disable(logging.WARNING)
    from ptebuild.builder.check import native_stderr_silenced

    with native_stderr_silenced():  # torchao/executorch native code prints to fd 2 on import
        import torch  # noqa: F401
        import executorch.exir  # noqa: F401
        import executorch.runtime  # noqa: F401
    import ptebuild.backends.portable  # noqa: F401
    import ptebuild.backends.xnnpack  # noqa: F401
    import ptebuild.builder.lowering  # noqa: F401

    _baseline = frozenset(sys.modules)
    _note_imports()


def _note_imports() -> None:
    """Add the distributions of modules imported since the last call to :data:`_imported`."""
    new = [name for name in list(sys.modules) if name not in _attributed]
    for name, dist in imported.snapshot(new).items():
        _imported.setdefault(name, dist)
    _attributed.update(new)


_changed_during_task: list[str] = []
"""A library that changed while a task ran: this process may hold either version, for good."""


def stale_toolchain() -> str | None:
    """Why this process must not run another task (a library it imported changed on disk), or None."""
    lines = _changed_during_task + imported.changes(_imported)
    return "; ".join(lines) + " since this worker process imported it" if lines else None


def _user_modules() -> list[str]:
    """Modules imported since :func:`prepare_worker` that are the user's code, not installed ones."""
    from ptebuild.builder.deps import _dist_dirs, _entries, _stdlib_dirs

    installed = _stdlib_dirs() + _dist_dirs(_entries(sys.path))
    out = []
    for name, module in list(sys.modules.items()):
        if name in _baseline or name.partition(".")[0] in sys.stdlib_module_names:
            continue
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and any(os.path.abspath(file).startswith(p + os.sep) for p in installed):
            continue
        out.append(name)
    return out


def fresh_state(seed: int = 0) -> None:
    """Isolate a task from the ones before it in this process.

    The user's modules are dropped from ``sys.modules`` so that edited model code is imported
    again (a warm interpreter must never lower stale code), and torch's global state is reset.
    """
    import importlib

    import torch

    for name in _user_modules():
        sys.modules.pop(name, None)
    importlib.invalidate_caches()
    torch.manual_seed(seed)
    torch.set_default_dtype(torch.float32)
    torch.set_grad_enabled(True)


def run_task(task: Task, progress: Callable[[str], None]) -> TaskResult:
    """Lower and check one program in this process; return its outputs by content."""
    import shutil
    import socket
    import tempfile

    from ptebuild.backends import get_backend
    from ptebuild.builder.deps import STARTUP_PATH, discover, installed_dists
    from ptebuild.builder.examples import make_inputs
    from ptebuild.builder.lowering import lower
    from ptebuild.builder.model_loading import build_model
    from ptebuild.manifest.plan import BuildPlan
    from ptebuild.store.hashing import hash_file

    stale = stale_toolchain()
    if stale is not None:
        raise StaleWorker(stale)
    fresh_state()
    started = time.monotonic()
    plan = BuildPlan.from_json(task.plan_json, manifest=task.manifest, manifest_dir=task.manifest_dir)
    program = next(p for p in plan.programs if p.name == task.program)
    manifest_dir = Path(plan.manifest_dir)
    installed_at_start = installed_dists([str(manifest_dir), *STARTUP_PATH])  # as discover() names them
    staging = Path(task.staging) if task.staging else Path(tempfile.mkdtemp(prefix="ptebuild-task-"))
    try:
        progress("building the model")
        model = build_model(program, manifest_dir, plan.manifest)
        inputs = {m.name: make_inputs(m, program.seed) for m in program.methods}
        lowered = lower(model, program, inputs, staging, progress)
        lowered_at = time.monotonic()
        figures, check_name = [], ""
        if program.check_enabled:
            progress("checking against eager PyTorch")
            ptd = lowered.files.get(program.ptd_name) if program.ptd_name else None
            checked, check_name = get_backend(program.backend).check(
                model, program, lowered.files[program.pte_name], ptd
            )
            figures = [f.to_json() for f in checked]
        deps = discover(manifest_dir, hash_file)
        for dist, version in deps.dists:  # a library upgraded while this task ran: which did it use?
            before = installed_at_start.get(dist)
            if before is None or before.version != version:
                _changed_during_task.append(f"distribution {dist} changed ({before.version if before else '-'} -> {version})")
                raise BuildError(
                    f"distribution {dist} changed while the program was lowered "
                    f"({before.version if before else 'not installed'} -> {version}); build again",
                    location=f"programs.{program.name}",
                )
        outputs = []
        for name, path in sorted(lowered.files.items()):
            digest, size = hash_file(path)
            outputs.append(OutputFile(name, digest, size))
        data = None if task.staging else {o.name: (staging / o.name).read_bytes() for o in outputs}
        return TaskResult(
            outputs=tuple(outputs),
            staging=task.staging,
            data=data,
            figures=tuple(figures),
            check=check_name,
            delegates=dict(lowered.delegated),
            deps=deps,
            lower_seconds=lowered_at - started,
            check_seconds=time.monotonic() - lowered_at,
            node=socket.gethostname(),
        )
    finally:
        _note_imports()  # what this task imported from installed distributions stays loaded
        if not task.staging:
            shutil.rmtree(staging, ignore_errors=True)


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


def worker_main(conn, log_path: str | None = None, cwd: str | None = None) -> None:
    """Entry point of a worker process of the local executor."""
    _die_with_parent()
    if cwd:
        os.chdir(cwd)
    if log_path:
        _redirect_output(log_path)
    try:
        prepare_worker()
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
        task = Task.from_json(message[1])
        kind, payload = execute(task, lambda text: conn.send(("progress", text)))
        conn.send((kind, *payload))


def execute(task: Task, progress: Callable[[str], None]) -> tuple[str, tuple]:
    """Run a task and turn any failure into data: ``("done", (result,))`` or
    ``("failed", (kind, message, manifest, location))``. Shared by every executor's worker side.

    ``manifest`` and ``location`` are the error's own fields (``programs.X``,
    ``models.Y.weights``) or, for an exception from the model's code or the toolchain, the
    program's; both empty for a ManifestError, whose message is complete."""
    where = f"programs.{task.program}"
    try:
        return "done", (run_task(task, progress),)
    except StaleWorker as exc:
        return "failed", ("stale", exc.message, "", where)
    except ManifestError as exc:
        return "failed", ("manifest", str(exc), "", "")
    except PtebuildError as exc:
        return "failed", ("build", exc.message, exc.manifest or "", exc.location or where)
    except Exception as exc:  # the model's code or the toolchain: keep the worker alive
        detail = traceback.format_exc() if task.debug else ""
        message = f"{type(exc).__name__}: {exc}".strip() + (f"\n{detail}" if detail else "")
        return "failed", ("build", message, "", where)
