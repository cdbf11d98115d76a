"""A worker interpreter: import torch and executorch once, then lower and check programs.

:func:`prepare_worker` (once per process), :func:`run_task` (one program, in this process) and
:func:`execute` (the same, any failure turned into a :class:`~ptebuild.worker.tasks.TaskFailure`)
are the worker side of every executor: a process of the local pool, a child of the warm server,
a Ray task. How the task and its outcome travel is the executor's business.

Before each task the worker checks that every library it has imported is still installed as it
was (:func:`stale_toolchain`); a worker that lowered with old code would be a stale cache entry.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptebuild.errors import REPORT, BuildError, StaleWorker
from ptebuild.worker import imported, model_memo
from ptebuild.worker.tasks import StagedProgress, Task, TaskFailure, TaskResult, outputs_stored

if TYPE_CHECKING:
    from ptebuild.deps import Dependencies

_baseline: frozenset[str] = frozenset()
_imported: dict[str, imported.ImportedDist] = {}
"""The distributions this process has imported, as installed when it did (:mod:`.imported`)."""
_attributed: set[str] = set()
"""The modules whose distributions :data:`_imported` already accounts for."""


PREPARED_BACKENDS = ("portable", "xnnpack")
"""The backends every worker imports before its first task (the others when a task needs them)."""


def prepare_worker() -> None:
    """Import torch and executorch once, quietly, with huge pages for large tensors
    (:func:`ptebuild.heap.huge_pages_for_tensors`), and remember which modules a task starts with."""
    global _baseline
    import ptebuild.deps  # its STARTUP_PATH: sys.path before the toolchain adds to it
    from ptebuild import heap

    heap.huge_pages_for_tensors()  # before torch's first allocation
    warnings.filterwarnings("ignore")
    import logging

    logging.disable(logging.WARNING)
    from ptebuild.lowering.check import native_stderr_silenced

    with native_stderr_silenced():  # torchao/executorch native code prints to fd 2 on import
        import executorch.exir
        import executorch.runtime  # noqa: F401
        import torch  # noqa: F401
    from ptebuild.backends import get_backend

    for name in PREPARED_BACKENDS:
        get_backend(name)
    import ptebuild.models.factory.lower  # noqa: F401

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
    from ptebuild.distributions import dist_dirs, path_entries, stdlib_dirs

    installed = stdlib_dirs() + dist_dirs(path_entries(sys.path))
    out = []
    for name, module in list(sys.modules.items()):
        top = name.partition(".")[0]
        if name in _baseline or top in sys.stdlib_module_names or top == "ptebuild":  # ptebuild is the worker's own
            continue
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and any(os.path.abspath(file).startswith(p + os.sep) for p in installed):
            continue
        out.append(name)
    return out


def fresh_state(seed: int = 0, keep: frozenset[str] = frozenset()) -> None:
    """Isolate a task from the ones before it in this process.

    The user's modules are dropped from ``sys.modules`` so that edited model code is imported
    again (a warm interpreter must never lower stale code), but for ``keep`` (those of the model
    kept for this task: :mod:`.model_memo`), and torch's global state is reset.
    """
    import importlib

    import torch

    for name in _user_modules():
        if name not in keep:
            sys.modules.pop(name, None)
    importlib.invalidate_caches()
    torch.manual_seed(seed)
    torch.set_default_dtype(torch.float32)
    torch.set_grad_enabled(True)


def run_task(task: Task, progress: Callable[[str], None]) -> TaskResult:
    """Build one program in this process through its model kind (:meth:`ModelKind.build
    <ptebuild.models.base.ModelKind.build>`: the same interface for every kind); its outputs go into
    the task's store and come back as digests, with what the worker counted in the lowered program
    and the stages it went through (timed here). What every kind shares is here: a toolchain that
    changed since this process imported it refused, the module state made fresh, the program bound
    to its backend, the stages' clock, the files the kind wrote checked to be its outputs, the
    discovered dependencies. Nothing is read whole into memory here (the lowering's own buffers are
    ExecuTorch's)."""
    import socket
    import tempfile

    from ptebuild.backends import bind_program
    from ptebuild.deps import STARTUP_PATH
    from ptebuild.distributions import installed_dists
    from ptebuild.insight.stages import Stage, StageClock
    from ptebuild.models import get_model_kind, options_model_of
    from ptebuild.models.base import BuildJob
    from ptebuild.models.factory.lower import StoredOutputs
    from ptebuild.store.cas import CAS

    stale = stale_toolchain()
    if stale is not None:
        raise StaleWorker(stale)
    model_kind = get_model_kind(task.plan.kind)
    kept = model_memo.take(task)  # this model, built by this process's last task, unchanged since? (else dropped)
    fresh_state(keep=model_memo.kept_modules())

    def entered(stage: Stage) -> None:  # progress lines from here on name this stage
        if isinstance(progress, StagedProgress):
            progress.stage = stage.value

    stages = StageClock(on_begin=entered)
    # Bound here, after the fresh module cache: its options validated once, by the backend's
    # modules as this task imports them (a task's model may be anything; ptebuild's own is too),
    # or by its model kind's options model (an LLM program's).
    program = bind_program(task.plan, options_model_of)
    manifest_dir = Path(task.manifest_dir)
    store = CAS(Path(task.store))
    installed_at_start = installed_dists([str(manifest_dir), *STARTUP_PATH])  # as discover() names them
    try:
        with tempfile.TemporaryDirectory(prefix="ptebuild-task-") as folder:  # the outputs by name, linked to their blobs
            outputs = StoredOutputs(store, Path(folder))  # streamed into the store

            def kind_progress(text: str) -> None:
                if text.startswith("checking") and stages.current is not Stage.CHECK:
                    stages.begin(Stage.CHECK)
                    # its files are stored by now: the builder may copy them out while the check runs
                    outputs_stored(progress, tuple(outputs.program.outputs[n] for n in sorted(outputs.program.outputs)))
                progress(text)

            job = BuildJob(program=program, manifest_dir=manifest_dir, display=task.manifest, outputs=outputs,
                           progress=kind_progress, stages=stages, store=store, folder=Path(folder), kept=kept,
                           keep=lambda model: model_memo.keep(task, model))
            built = model_kind.build(job)
            stages.begin(Stage.STORE)
            unstored = sorted(set(built.files) - set(outputs.program.outputs))
            if unstored:
                raise BuildError(f"the {model_kind.name} kind wrote {', '.join(unstored)} outside its outputs; {REPORT}",
                                 location=f"programs.{program.name}")
            deps = _dependencies(manifest_dir, installed_at_start, program.name)
            model_memo.note_modules(frozenset(_user_modules()))
            return TaskResult(
                outputs=tuple(outputs.program.outputs[name] for name in sorted(outputs.program.outputs)),
                figures=tuple(built.figures),
                check=built.check,
                delegates=dict(built.delegated),
                deps=deps,
                lower_seconds=built.lower_seconds,
                check_seconds=built.check_seconds,
                node=socket.gethostname(),
                warnings=tuple(built.warnings),
                insight=built.insight,
                stages=tuple(stages.spans()),
            )
    finally:
        _note_imports()  # what this task imported from installed distributions stays loaded


def _dependencies(manifest_dir: Path, installed_at_start: dict[str, Any], program_name: str) -> Dependencies:
    """What the task's lowering used (:func:`ptebuild.deps.discover`); BuildError if a library it
    imported was upgraded while it ran (which version did it use?)."""
    from ptebuild.deps import discover
    from ptebuild.hashing import hash_file

    deps = discover(manifest_dir, hash_file)
    for dist, version in deps.dists:
        before = installed_at_start.get(dist)
        if before is None or before.version != version:
            _changed_during_task.append(f"distribution {dist} changed ({before.version if before else '-'} -> {version})")
            raise BuildError(
                f"distribution {dist} changed while the program was lowered "
                f"({before.version if before else 'not installed'} -> {version}); build again",
                location=f"programs.{program_name}",
            )
    return deps


def execute(task: Task, progress: Callable[[str], None]) -> TaskResult | TaskFailure:
    """Run a task and turn any failure into a value (:class:`~ptebuild.worker.tasks.TaskFailure`).
    Shared by every executor's worker side."""
    try:
        if task.threads:  # its share of the cores (:func:`ptebuild.worker.tasks.threads_per_worker`)
            import torch

            torch.set_num_threads(task.threads)
        return run_task(task, progress)
    except Exception as exc:  # the model's code or the toolchain too: keep the worker alive
        model_memo.drop()  # its model may be half-changed: the next task builds its own
        return TaskFailure.from_exception(exc, task.program, task.debug)
