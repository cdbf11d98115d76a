"""``build --check``: lower every program again elsewhere and compare the bytes (Nix's ``--check``).

Every built or cached program is lowered once more, ignoring the cache, by the local executor in
another temporary folder and working directory, with another ``PYTHONHASHSEED`` and one thread
(``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``): what a program's bytes must not depend on. A program
whose bytes differ fails, naming the file and the first part that differs (``ptebuild diff``).
An ETRecord is not compared: it holds object ids of the lowering's graphs (``export_graph_id``)
and serialized graphs that differ between two lowerings of the same program.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from ptebuild.backends import get_backend
from ptebuild.builder import keys
from ptebuild.errors import StoreError
from ptebuild.results import FailureKind, Status

if TYPE_CHECKING:
    from ptebuild.builder.build import Builder
    from ptebuild.builder.schedule import Job
    from ptebuild.worker.tasks import Event

VARIED = "another PYTHONHASHSEED, working folder, temporary folder and thread count"
"""What the second lowering changes (named in the message of a program whose bytes differ)."""


def check_rebuilds(builder: Builder) -> None:
    """Lower every built or cached program again, ignoring the cache, in another temporary
    folder and working directory, with another PYTHONHASHSEED and thread count; a program
    whose bytes differ fails, naming the file and the part that differs."""
    import random
    import tempfile

    from ptebuild.builder.schedule import Job
    from ptebuild.worker.tasks import EventKind, TaskFailure

    builder._plan_json = builder._plan_json or builder.plan.to_json()
    programs = [
        p for p in builder.plan.programs
        if p.name in builder.results and builder.results[p.name].status in (Status.BUILT, Status.CACHED)
    ]
    if not programs:
        return
    jobs = []
    for program in programs:
        result = builder.results[program.name]
        builder.report(program.name, "progress", "lowering again to check that the bytes are reproducible")
        inputs = keys.program_inputs(program, builder.plan, builder.digest_file, get_backend(program.backend))
        jobs.append(Job(program.name, result.key, make_task=builder._task_maker(program, result, inputs), data=program))

    def finished(job: Job, event: Event) -> bool:
        from ptebuild.hashing import hash_file

        result = builder.results[job.name]
        staging = builder._job_staging.pop(job.name)
        try:
            if event.kind is not EventKind.DONE or event.result is None:
                result.status = Status.FAILED
                # Every FAILED event carries its failure (Event.failed), every DONE one its result.
                failure = event.failure or TaskFailure(FailureKind.BUILD, event.text or "the executor sent no result")
                result.message = builder._located(job.data, f"--check: lowering again failed: {failure.message}",
                                               failure.location, failure.manifest)
                result.failure = failure.kind
                return builder.options.keep_going
            files = event.result.files_into(staging / "inline")
            differences = []
            data = builder.shared.group_of(job.name)
            own = builder.shared.members[data][job.name].result.outputs if data else result.outputs
            for output in own:
                again = files.get(output.name)
                if again is None or output.name.endswith(".etrecord") or hash_file(again) == (output.sha256, output.size):
                    continue
                before = builder.folder.path / output.name
                if data and output.name.endswith(".ptd"):
                    before = _member_file(builder, job.name, output.name, staging)
                differences.append(f"{output.name}: {_first_difference(before, again)}")
            result.rebuild = "differs" if differences else "same"
            if differences:
                result.status = Status.FAILED
                result.message = builder._located(
                    job.data,
                    f"--check: lowering again gave other bytes (not reproducible with {VARIED}): " + "; ".join(differences),
                )
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        builder.report(job.name, "done", f"--check: {result.rebuild or 'failed'}")
        return result.status is not Status.FAILED or builder.options.keep_going

    with tempfile.TemporaryDirectory(prefix="ptebuild-check-") as elsewhere:
        threads = "1" if (os.cpu_count() or 1) > 1 else "2"  # another thread count than the build's
        environment = {
            "PYTHONHASHSEED": str(random.SystemRandom().randrange(1, 2**31)),
            "TMPDIR": elsewhere,
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
        }
        options = {"environment": environment, "cwd": elsewhere}
        builder._schedule("local", options, jobs, None, lambda job: False, lambda job: None, finished)

def _member_file(builder: Builder, name: str, file_name: str, folder: Path) -> Path:
    """A shared-data program's own ``.ptd`` (before merging), restored from the cache."""
    data = builder.shared.group_of(name)
    dest = folder / "own" / file_name
    dest.parent.mkdir(parents=True, exist_ok=True)
    if data is None or builder.cache is None:  # never: called for a member of a group, kept in the cache
        raise StoreError(f"{name}: its own {file_name} is not in the cache")
    builder.cache.restore_result(builder.shared.members[data][name].result, {file_name: dest})
    return dest


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
