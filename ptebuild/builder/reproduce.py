"""``build --reproduce``: lower every program again elsewhere and compare the bytes (Nix's ``--check``).

Every built or cached program is lowered once more, ignoring the cache, by the local executor in
another temporary folder and working directory, with another ``PYTHONHASHSEED`` and one thread
(``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``): what a program's bytes must not depend on. A program
whose bytes differ fails, naming the file and the first part that differs (``ptebuild diff``).
An ETRecord is not compared: it holds object ids of the lowering's graphs (``export_graph_id``)
and serialized graphs that differ between two lowerings of the same program.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ptebuild.errors import CorruptObject, StoreError
from ptebuild.results import FailureKind, Status

if TYPE_CHECKING:
    from ptebuild.builder.context import BuildContext
    from ptebuild.builder.program_target import ProgramTarget
    from ptebuild.builder.schedule import Job
    from ptebuild.worker.tasks import Event

VARIED = "another PYTHONHASHSEED, working folder, temporary folder and thread count"
"""What the second lowering changes (named in the message of a program whose bytes differ)."""


def reproduce_programs(context: BuildContext, targets: list[ProgramTarget]) -> None:
    """Lower every built or cached program of ``targets`` again, ignoring the cache, in another
    temporary folder and working directory, with another PYTHONHASHSEED and thread count; a
    program whose bytes differ fails, naming the file and the part that differs. The second
    lowering's outputs go into the build's store, and are compared there by digest."""
    import random
    import tempfile

    from ptebuild.builder.schedule import Job, run_jobs
    from ptebuild.worker.tasks import EventKind, TaskFailure

    chosen = [t for t in targets if t.result.status in (Status.BUILT, Status.CACHED) and t.action is not None]
    if not chosen:
        return
    jobs = []
    for target in chosen:
        context.report(target.name, "progress", "lowering again to check that the bytes are reproducible")
        jobs.append(Job(target.name, target.key, make_task=target.make_task, data=target))

    def finished(job: Job, event: Event) -> bool:
        target: ProgramTarget = job.data
        result = target.result
        if event.kind is not EventKind.DONE or event.result is None:
            result.status = Status.FAILED
            # Every FAILED event carries its failure (Event.failed), every DONE one its result.
            failure = event.failure or TaskFailure(FailureKind.BUILD, event.text or "the executor sent no result")
            result.message = context.located(target.name, f"--reproduce: lowering again failed: {failure.message}",
                                             failure.location, failure.manifest)
            result.failure = failure.kind
            return context.options.keep_going
        again = {o.name: o for o in event.result.outputs}
        store = context.store()
        differences = []
        with tempfile.TemporaryDirectory(prefix="ptebuild-check-own-") as folder:
            for output in target.action.outputs if target.action is not None else ():
                other = again.get(output.name)
                if other is None or output.name.endswith(".etrecord") or (other.sha256, other.size) == (output.sha256, output.size):
                    continue
                before = context.folder.path / output.name
                if not context.folder.in_place(output):  # a shared .ptd's own, before the merge
                    try:
                        before = target.own_file(output.name, Path(folder))
                    except (CorruptObject, StoreError) as exc:
                        differences.append(f"{output.name}: differs (its first build could not be read back: {exc})")
                        continue
                differences.append(f"{output.name}: {_first_difference(before, store.path(other.sha256))}")
        result.rebuild = "differs" if differences else "same"
        if differences:
            result.status = Status.FAILED
            result.message = context.located(
                target.name,
                f"--reproduce: lowering again gave other bytes (not reproducible with {VARIED}): " + "; ".join(differences),
            )
        context.report(job.name, "done", f"--reproduce: {result.rebuild or 'failed'}")
        return result.status is not Status.FAILED or context.options.keep_going

    with tempfile.TemporaryDirectory(prefix="ptebuild-check-") as elsewhere:
        threads = "2" if _build_threads(min(context.options.jobs, len(jobs))) == 1 else "1"  # another count than the build's
        environment = {
            "PYTHONHASHSEED": str(random.SystemRandom().randrange(1, 2**31)),
            "TMPDIR": elsewhere,
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
        }
        options = {"environment": environment, "cwd": elsewhere}
        run_jobs("local", options, jobs, None, context.report, workers=context.options.jobs,
                 ready=lambda job: False, started=lambda job: None, finished=finished)


def _build_threads(workers: int) -> int:
    """The torch thread count a build's worker runs with: its share of the cores beside
    ``workers - 1`` others (:func:`ptebuild.worker.tasks.threads_per_worker`), else the count the
    environment sets, else torch's own (about the cores)."""
    from ptebuild.worker.tasks import threads_per_worker

    share = threads_per_worker(workers)
    if share:
        return share
    given = os.environ.get("OMP_NUM_THREADS", "")
    return int(given) if given.isdigit() else (os.cpu_count() or 1)


def _first_difference(published: Path, again: Path) -> str:
    """The first part that differs between two builds of one file (``ptebuild diff``)."""
    from ptebuild.errors import FormatError
    from ptebuild.runtime.diff import diff

    try:
        report = diff(published, again)
    except (FormatError, OSError) as exc:
        return f"differs ({exc})"
    if report.same:
        return "same bytes"
    shown = "; ".join(str(d) for d in report.differences[:3])
    more = len(report.differences) - 3
    return shown + (f" (and {more} more)" if more > 0 else "")
