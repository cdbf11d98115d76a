"""``ptebuild.run(manifest, program)``: run a built program on its example inputs against eager
PyTorch, and time both (:mod:`ptebuild.worker.timed_run`; imports torch and executorch)."""

from __future__ import annotations

import os
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ptebuild.worker.timed_run import ProgramRun


def run(manifest: str | os.PathLike[str], program: str, *, method: str | None = None, iters: int = 20,
        out: str | os.PathLike[str] | None = None) -> ProgramRun:
    """Load ``program``'s ``.pte`` and ``.ptd`` (checked to belong together) from the build's output
    folder (``out``, default the manifest's), run each method (or ``method``) ``iters`` times after
    a warm-up, compare with eager PyTorch; the report says whether it is within the tolerances."""
    from ptebuild.manifest import load_manifest
    from ptebuild.worker.timed_run import run_program

    plan = load_manifest(os.fspath(manifest))
    return run_program(plan, program, method=method, iters=iters, out_dir=Path(out) if out else None)
