"""Build a plan: restore what the cache has, run the rest on an executor, publish atomically.

The units of a build, each in its own module, meeting in a :class:`~.context.BuildContext`:

- :mod:`ptebuild.builder.target`, :mod:`~ptebuild.builder.program_target` and
  :mod:`~ptebuild.builder.shim_targets`: one target's life (key, lookup, obstacles, task, its
  outcome checked, stored and handed to the publisher);
- :mod:`ptebuild.builder.publish`: the output folder and shared weights groups (publishing from
  the build's store or a cache hit, the build record);
- :mod:`ptebuild.builder.schedule` and :mod:`ptebuild.builder.executors`: who lowers what;
- :mod:`ptebuild.builder.reproduce`: ``--reproduce``;
- :mod:`ptebuild.builder.budgets`: each delivered program's figures judged against its budget;
- :mod:`ptebuild.builder.timings`: what each target did when (``--timings``).

This module only orders them: shims, then each program's key, shard, cache, obstacles, then the
tasks of those left, then the shared groups, then ``--reproduce``, then the budgets; with
``--timings``, the build's timeline is written last, whatever happened. It imports neither torch nor
executorch: a build whose programs are all cached never pays for them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ptebuild import own_code
from ptebuild.builder import keys
from ptebuild.builder.context import BuildContext, BuildOptions, Report
from ptebuild.builder.program_target import ProgramTarget
from ptebuild.builder.publish import Publisher
from ptebuild.builder.shim_targets import ShimTarget
from ptebuild.plan import BuildPlan
from ptebuild.results import Status, TargetResult

if TYPE_CHECKING:
    from ptebuild.builder.noop import LookedAt
    from ptebuild.builder.schedule import Job
    from ptebuild.insight.timeline import Timeline
    from ptebuild.worker.tasks import Event

__all__ = ["BuildOptions", "Builder", "Report", "build", "in_shard"]


def in_shard(key: str, shard: tuple[int, int] | None) -> bool:
    """Whether a program with action key ``key`` belongs to ``shard``: stable in the key alone."""
    if shard is None:
        return True
    index, count = shard
    return int(key[:16], 16) % count == index - 1


def longest_first(jobs: list[Job]) -> list[Job]:
    """``jobs`` with the longest expected first, so that workers in parallel end together (LPT):
    by their last lowering's seconds where every one has been built with this cache, else by their
    backend's weight (:meth:`ptebuild.backends.base.Backend.lowering_weight`); ties keep the
    manifest's order."""
    targets: list[ProgramTarget] = [job.data for job in jobs]
    seconds = [t.expected_seconds() for t in targets]
    if all(s is not None for s in seconds):
        expected = dict(zip([t.name for t in targets], seconds))
    else:
        expected = {t.name: t.backend.lowering_weight(t.program.options) * len(t.program.methods) for t in targets}
    return sorted(jobs, key=lambda job: -(expected[job.name] or 0.0))


class Builder:
    """One build of a plan (see the module's docstring)."""

    def __init__(self, plan: BuildPlan, options: BuildOptions, report: Report) -> None:
        self.context = BuildContext(plan, options, report)
        self.publisher = Publisher(self.context)
        self.other_shards = 0
        self.timings_files: tuple[Path, Path] | None = None
        """``--timings``: the page and the trace written (None: not asked, or not written)."""

    @property
    def folder(self) -> Path:
        """The output folder."""
        return self.context.folder.path

    # -- the whole build ------------------------------------------------------------------------

    def run(self) -> list[TargetResult]:
        """Build every target; return one result per target, in manifest order."""
        context = self.context
        made = not context.folder.path.exists()
        context.folder.path.mkdir(parents=True, exist_ok=True)
        context.folder.check_ownership()
        for program in context.plan.programs:
            ProgramTarget.new_result(context, program)
        for shim in context.plan.shims:
            ShimTarget.new_result(context, shim)
        try:
            for shim in context.plan.shims:
                ShimTarget(context, self.publisher, shim).build()
            built = self.build_programs([ProgramTarget(context, self.publisher, p) for p in context.plan.programs])
            if context.options.reproduce:
                from ptebuild.builder.reproduce import reproduce_programs

                reproduce_programs(context, built)
            from ptebuild.builder import failure_logs

            for result in context.results.values():
                if result.kind == "program" and result.status in (Status.BUILT, Status.CACHED):
                    failure_logs.forget(context.folder.path, result.name)
            from ptebuild.builder.budgets import judge_budgets

            judge_budgets(context)
        finally:
            context.folder.clean()
            context.folder.write_record()
            if context.options.timings:
                self.write_timings()
            if made:
                context.folder.remove_if_empty()  # a refused manifest leaves no folder behind
        return list(context.results.values())

    def build_programs(self, targets: list[ProgramTarget]) -> list[ProgramTarget]:
        """Restore or lower each program of this shard; publish the shared groups; return the
        programs of this shard."""
        context = self.context
        mine = []
        shard_keys = self._shard_keys(targets)
        for target in targets:
            if not in_shard(shard_keys[target.name], context.options.shard):
                del context.results[target.name]
                self.other_shards += 1
            else:
                mine.append(target)
        jobs = []
        for target in mine:
            if target.restore(local_only=context.nodes_cache):
                self._done(target)
                continue
            # What this machine can do is known before anything is lowered (:mod:`.capabilities`).
            obstacle = target.obstacle()
            if obstacle is not None and target.restore_elsewhere():
                self._done(target, f"{target.result.status} (built on {target.result.node or 'another machine'})")
                continue
            if obstacle is not None:
                target.blocked(obstacle)
                context.report(target.name, "done", str(target.result.status))
                continue
            jobs.append(target.job())
        if jobs:
            self._run(longest_first(jobs))
        self.publisher.finish()
        return mine

    def _done(self, target: ProgramTarget, text: str = "") -> None:
        import time

        target.result.seconds = time.monotonic() - target.started
        self.context.report(target.name, "done", text or str(target.result.status))

    def _shard_keys(self, targets: list[ProgramTarget]) -> dict[str, str]:
        """The key each program is sharded by: its own, or its shared-data group's smallest (a
        group is built whole, on one runner)."""
        own = {t.name: t.key for t in targets}
        found = {}
        for name, key in own.items():
            data = self.publisher.group_of(name)
            found[name] = key if data is None else min(own[p] for p in self.publisher.groups.groups[data] if p in own)
        return found

    def _run(self, jobs: list[Job]) -> None:
        from ptebuild.builder.schedule import run_jobs

        context = self.context

        def ready(job: Job) -> bool:
            target: ProgramTarget = job.data
            return target.ready()

        def started(job: Job) -> None:
            target: ProgramTarget = job.data
            target.submitted()

        def finished(job: Job, event: Event) -> bool | Literal["again"]:
            target: ProgramTarget = job.data
            return target.finished(event)

        def stored(job: Job, event: Event) -> None:
            target: ProgramTarget = job.data
            target.stored(event.outputs)

        targets: dict[str, ProgramTarget] = {job.name: job.data for job in jobs}

        def expected(name: str, stage: str) -> float | None:
            target = targets.get(name)
            return target.expected_stage(stage) if target is not None else None

        options = dict(context.options.executor_options)
        if context.plan.shims and context.options.executor == "local":
            # Windows CUDA programs link the shim import library this build just wrote.
            options.setdefault("environment", {"PTEBUILD_SHIM_LIBRARY_DIR": str(context.folder.path)})
        left = run_jobs(context.options.executor, options, jobs, context.cache, context.report,
                        workers=context.options.jobs, ready=ready, started=started, finished=finished,
                        expected=expected, stored=stored)
        for job in left:
            context.results[job.name].status = Status.SKIPPED

    # -- the build's timeline (--timings) -------------------------------------------------------

    def timeline(self) -> Timeline:
        """The build's timeline so far (:class:`ptebuild.insight.timeline.Timeline`)."""
        from ptebuild.builder.timings import figures_of

        context = self.context
        return context.timings.timeline(context.plan.manifest, list(context.results.values()), figures_of(context.folder.entries),
                                        executor=context.options.executor, jobs=context.options.jobs)

    def write_timings(self) -> None:
        """``--timings``: the page and the trace into ``<out>/.ptebuild/`` (a failure to write them is a warning)."""
        from ptebuild.builder.timings import write

        folder = self.context.folder.path
        try:
            self.timings_files = write(folder, self.timeline())
        except OSError as exc:
            self.context.report("", "warning", f"--timings: cannot write into {folder}: {exc.strerror or exc}")

    # -- what a build would do, and what it read ------------------------------------------------

    def static_inputs(self) -> dict[str, tuple[str, str, str | None, dict[str, str]]]:
        """Each target's ``(kind, key, backend, inputs)`` as this build would key it, without
        building anything (``--locked`` compares them with the lock first)."""
        context = self.context
        found: dict[str, tuple[str, str, str | None, dict[str, str]]] = {}
        for shim in context.plan.shims:
            inputs = keys.shim_inputs(shim, context.plan, context.digest_file)
            found[shim.name] = ("shims", keys.action_key(inputs), None, inputs)
        programs = {}
        for program in context.plan.programs:
            inputs = keys.program_inputs(program, context.plan, context.digest_file, context.cache)
            programs[program.name] = ("program", keys.action_key(inputs), program.backend, inputs)
        for name, entry in programs.items():
            data = self.publisher.group_of(name)
            shard_key = min(programs[p][1] for p in self.publisher.groups.groups[data]) if data else entry[1]
            if in_shard(shard_key, context.options.shard):
                found[name] = entry
        return found

    def looked_at(self) -> LookedAt:
        """Files, folders and cache entries that stand for all this build read (:mod:`.noop`)."""
        import sys

        from ptebuild.builder.noop import LookedAt

        context = self.context
        touched = context.touched
        files = set(touched) | {str(p) for p in own_code.files()}
        files.add(context.manifest_path)
        files.add(str(context.folder.path / "ptebuild.json"))
        files.add(os.path.realpath(sys.executable))
        entries = []
        if context.cache is not None:
            entries = [str(p) for p in context.cache.entry_files([r.key for r in context.results.values()])]
        folders = {str(Path(f).parent) for f in touched} | {p or "." for p in sys.path}
        folders |= {str(context.folder.path), context.plan.manifest_dir}
        for program in context.plan.programs:  # a new module in a folder of the model's package
            folders |= keys.source_folders(program, Path(context.plan.manifest_dir))
        return LookedAt(files, folders, entries, touched)


def build(plan: BuildPlan, options: BuildOptions, report: Report | None = None) -> list[TargetResult]:
    """Build every target of ``plan``; return one result per target, in manifest order."""
    return Builder(plan, options, report or (lambda *_: None)).run()
