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
import time
import warnings
from pathlib import Path

from ptebuild.errors import BuildError, StaleWorker
from ptebuild.results import OutputFile
from ptebuild.worker import imported
from ptebuild.worker.tasks import Progress, Task, TaskFailure, TaskResult

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
    from ptebuild.lowering.check import native_stderr_silenced

    with native_stderr_silenced():  # torchao/executorch native code prints to fd 2 on import
        import executorch.exir
        import executorch.runtime  # noqa: F401
        import torch  # noqa: F401
    import ptebuild.backends.portable
    import ptebuild.backends.xnnpack
    import ptebuild.worker.lower  # noqa: F401

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


def run_task(task: Task, progress: Progress) -> TaskResult:
    """Lower and check one program in this process; return its outputs by content, what the
    worker counted in the lowered program and the stages it went through (timed here)."""
    import shutil
    import socket
    import tempfile

    from ptebuild.backends import get_backend
    from ptebuild.deps import STARTUP_PATH, discover
    from ptebuild.distributions import installed_dists
    from ptebuild.hashing import hash_file
    from ptebuild.insight.stages import Stage, StageClock
    from ptebuild.lowering.examples import make_inputs
    from ptebuild.plan import BuildPlan
    from ptebuild.worker.lower import lower
    from ptebuild.worker.model_loading import build_model

    stale = stale_toolchain()
    if stale is not None:
        raise StaleWorker(stale)
    fresh_state()
    started = time.monotonic()
    stages = StageClock()

    def report(text: str) -> None:
        """Progress text with the stage it belongs to."""
        stage = stages.current
        progress(text, stage.value if stage is not None else "")

    plan = BuildPlan.from_json(task.plan_json, manifest=task.manifest, manifest_dir=task.manifest_dir)
    program = next(p for p in plan.programs if p.name == task.program)
    manifest_dir = Path(plan.manifest_dir)
    installed_at_start = installed_dists([str(manifest_dir), *STARTUP_PATH])  # as discover() names them
    staging = Path(task.staging) if task.staging else Path(tempfile.mkdtemp(prefix="ptebuild-task-"))
    try:
        stages.begin(Stage.IMPORT)
        report("building the model")
        model = build_model(program, manifest_dir, plan.manifest)
        inputs = {m.name: make_inputs(m, program.seed) for m in program.methods}
        lowered = lower(model, program, inputs, staging, report, stages)
        lowered_at = time.monotonic()
        figures, check_name = [], ""
        if program.check_enabled:
            backend = get_backend(program.backend)
            kind = backend.check_kind(program.options)
            stages.begin(Stage.CHECK)
            report("checking against eager PyTorch" if kind.numeric else f"checking its structure ({kind.name}: nothing is run)")
            ptd = lowered.files.get(program.ptd_name) if program.ptd_name else None
            checked, check_name = backend.check(
                model, program, lowered.files[program.pte_name], ptd
            )
            figures = [f.to_json() for f in checked]
        if program.bpte_name:
            from ptebuild.lowering.bundled_io import write_bpte

            stages.begin(Stage.BUNDLE)
            report("bundling the test cases")
            reference = get_backend(program.backend).reference_model(model, program)  # what the check holds it to
            lowered.files[program.bpte_name] = write_bpte(
                reference, program, lowered.files[program.pte_name], staging / program.bpte_name
            )
        stages.begin(Stage.STORE)
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
            warnings=tuple(lowered.problems),
            insight=lowered.insight.worker_part().to_json() if lowered.insight is not None else None,
            stages=tuple(span.to_json() for span in stages.spans()),
        )
    finally:
        _note_imports()  # what this task imported from installed distributions stays loaded
        if not task.staging:
            shutil.rmtree(staging, ignore_errors=True)


def execute(task: Task, progress: Progress) -> TaskResult | TaskFailure:
    """Run a task and turn any failure into a value (:class:`~ptebuild.worker.tasks.TaskFailure`).
    Shared by every executor's worker side."""
    try:
        return run_task(task, progress)
    except Exception as exc:  # the model's code or the toolchain too: keep the worker alive
        return TaskFailure.from_exception(exc, task.program, task.debug)
