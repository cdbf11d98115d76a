"""Build a plan: restore what the cache has, run the rest on an executor, publish atomically.

The pieces, each in its own module:

- :mod:`ptebuild.builder.keys`: a target's static inputs and its action key;
- :mod:`ptebuild.deps`: dependencies discovered by the last lowering, checked now;
- :mod:`ptebuild.store.frontend`: the cache (local and remote tiers) behind four verbs;
- :mod:`ptebuild.builder.schedule` and :mod:`ptebuild.builder.executors`: who lowers what;
- :mod:`ptebuild.builder.outdir`: the output folder (ownership, staging, publishing, record).

This module only decides, per target, which of them to call. It imports neither torch nor
executorch: a build whose programs are all cached never pays for them.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ptebuild import keyinputs, own_code
from ptebuild.builder import keys
from ptebuild.builder.outdir import OutputFolder
from ptebuild.deps import DependencyCheck
from ptebuild.errors import CorruptObject, StoreError
from ptebuild.plan import BuildPlan, ProgramPlan, ShimPlan
from ptebuild.results import ActionResult, FailureKind, Source, Status, TargetResult

if TYPE_CHECKING:
    from ptebuild.backends.base import Backend
    from ptebuild.builder.capabilities import Capabilities, Obstacle
    from ptebuild.builder.noop import LookedAt
    from ptebuild.builder.schedule import Job
    from ptebuild.insight.timeline import Timeline
    from ptebuild.store.frontend import Cache, Hit
    from ptebuild.worker.tasks import Event, Task, TaskResult

Report = Callable[[str, str, str], None]
"""(target name, event, text): "start", "progress", "warning", "done" events for the CLI."""


@dataclass
class BuildOptions:
    out_dir: Path | None = None
    cache: Cache | None = None
    """The cache front end, or None to build without caching."""
    jobs: int = 1
    keep_going: bool = False
    explain: bool = False
    debug: bool = False
    executor: str = "local"
    executor_options: dict[str, Any] = field(default_factory=dict)
    shard: tuple[int, int] | None = None
    """``(i, n)``: build only the programs whose action key falls in shard ``i`` of ``n`` (1-based)."""
    rebuild_check: bool = False
    """``--check``: after the build, lower every program again, ignoring the cache, in a changed
    environment, and fail any program whose bytes differ (Nix's ``--check``)."""
    timings: bool = False
    """Write the build's timeline into ``<out>/.ptebuild/`` (:mod:`.timings`)."""


def in_shard(key: str, shard: tuple[int, int] | None) -> bool:
    """Whether a program with action key ``key`` belongs to ``shard``: stable in the key alone."""
    if shard is None:
        return True
    index, count = shard
    return int(key[:16], 16) % count == index - 1


def _method_specs(program: ProgramPlan) -> tuple[dict[str, Any], ...]:
    return tuple(
        {
            "name": m.name,
            "inputs": [{"name": i.name, "shape": list(i.shape), "dtype": i.dtype} for i in m.inputs],
            "dims": [{"name": d.name, "min": d.min, "max": d.max} for d in m.dims],
        }
        for m in program.methods
    )


class Builder:
    def __init__(self, plan: BuildPlan, options: BuildOptions, report: Report) -> None:
        self.plan = plan
        self.options = options
        self.report = report
        self.cache = options.cache
        out_dir = options.out_dir or plan.out_dir()
        self.folder = OutputFolder(plan, out_dir, self.digest_file, self.cache)
        self.deps = DependencyCheck(Path(plan.manifest_dir), self.digest_file)
        self.results: dict[str, TargetResult] = {}
        self.touched: dict[str, str] = {}
        """Every file this build digested, and its SHA-256: what a no-op stamp (:mod:`.noop`) keeps."""
        self.other_shards = 0
        self._manifest_path = str(Path(plan.manifest_dir, Path(plan.manifest).name))
        self._job_staging: dict[str, Path] = {}
        self._plan_json = ""
        self._capabilities: Capabilities | None = None  # made when first needed
        self._nodes_cache = self._executor_caches_on_nodes()
        """The executor's nodes look programs up in the remote cache and store them there
        themselves: this machine looks in its local tier only, and fetches what a node names."""
        self._inline_again: set[str] = set()
        """Programs whose node result could not be fetched: their task runs again, bytes inline."""
        from ptebuild.builder.shared_data import SharedData
        from ptebuild.builder.timings import Timings

        self.shared = SharedData(self)
        self.timings = Timings()
        """What each target did when (written with ``--timings``)."""
        self.timings_files: tuple[Path, Path] | None = None
        self._submitted: dict[str, float] = {}
        self._last_stages: dict[str, tuple[Any, ...]] = {}

    def digest_file(self, path: Path) -> tuple[str, int]:
        if self.cache is not None:
            digest = self.cache.digest_file(path)
        else:
            from ptebuild.hashing import hash_file

            digest = hash_file(path)
        self.touched[str(path)] = digest[0]
        return digest

    def _histories(self, name: str) -> list[str]:
        """The --explain histories of a target, most precise first: per manifest (its path) and
        name, never per name alone; then per manifest file name, for a checkout moved or copied."""
        return [f"{self._manifest_path}::{name}", f"{Path(self.plan.manifest).name}::{name}"]

    def _remember(self, name: str, key: str) -> None:
        if self.cache is None:
            return
        for history in self._histories(name):
            self.cache.remember(history, key)

    def _last(self, name: str) -> ActionResult | None:
        if self.cache is None:
            return None
        for history in self._histories(name):
            last = self.cache.last(history)
            if last is not None:
                return last
        return None

    # -- the cache ------------------------------------------------------------------------------

    def _executor_caches_on_nodes(self) -> bool:
        if self.cache is None or not self.options.executor_options.get("remote_cache"):
            return False
        from ptebuild.builder.executors import executor_class

        return bool(getattr(executor_class(self.options.executor), "caches_on_nodes", False))

    def _lookup(self, result: TargetResult, elsewhere: str | None = None, local_only: bool = False) -> Hit | None:
        if self.cache is None:
            return None
        if elsewhere is not None:
            check = lambda r: self.deps.changes(r.deps, project_only=True)  # noqa: E731
            lookup = self.cache.lookup(elsewhere, check=check, alias=True)
        else:
            lookup = self.cache.lookup(result.key, check=lambda r: self.deps.changes(r.deps), local_only=local_only,
                                       wanted=lambda r: self._wanted(result.name, r))
        if lookup.hit is None and lookup.stale:
            result.explain = lookup.stale
        return lookup.hit

    def _wanted(self, name: str, found: ActionResult) -> list[str]:
        """The outputs of a remote hit this folder needs: those not in place; for a program of a
        shared-weights group its .pte only (the group's merged .ptd is fetched as one, and its
        own .ptd only if the merge must be made again)."""
        missing = [o.name for o in self.folder.missing(found.outputs)]
        if self.shared.group_of(name) is not None:
            return [n for n in missing if not n.endswith(".ptd")]
        return missing

    def _restore(self, result: TargetResult, elsewhere: str | None = None, local_only: bool = False) -> ActionResult | None:
        """Put a cached result's files in place (those missing only); None on a miss.

        A program sharing a data name is only held: its group's files are merged and published
        together, later (:mod:`ptebuild.builder.shared_data`). ``local_only``: the local tier only.
        """
        from ptebuild.insight.stages import Stage

        start = self.timings.now()
        hit = self._lookup(result, elsewhere, local_only)
        if hit is None:  # no cache, no hit
            return None
        used = self._use(result, hit, elsewhere)
        if used is not None:
            self.timings.span(result.name, Stage.RESTORE, start)
        return used

    def _use(self, result: TargetResult, hit: Hit, elsewhere: str | None = None, node: str = "") -> ActionResult | None:
        """:meth:`_restore` for a hit in hand; ``node``: a node of the executor built it just now
        (it is reported built, there). None if its files could not be restored."""
        cache = self.cache
        if cache is None:
            return None
        shared = self.shared.group_of(result.name) is not None
        missing = [] if shared else self.folder.missing(hit.result.outputs)
        if missing:
            staging = self.folder.stage(f"{result.name}.restore")
            try:
                cache.restore(hit, {o.name: staging / o.name for o in missing})
                self.folder.publish({o.name: staging / o.name for o in missing})
            except CorruptObject as exc:
                self.report(result.name, "warning", f"{exc}; rebuilding")
                return None
            except StoreError:
                return None
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        result.take(hit.result)
        if node:
            result.status, result.node = Status.BUILT, node
        else:
            result.status = Status.CACHED
            result.cache_hit = True
            result.source = hit.source
            where = "the remote cache" if hit.source is Source.REMOTE else "the cache"
            result.explain = [f"restored from {where}"] if missing or hit.source is Source.REMOTE else ["up to date"]
        if elsewhere is not None:
            result.key, result.node = hit.result.key, hit.result.built_on
            facts = keyinputs.of_kind(hit.result.inputs, keyinputs.InputKind.TOOLCHAIN)
            toolchain = ", ".join(f"{k} {v}" for k, v in sorted(facts.items()) if "code" not in k)
            result.explain = [f"{result.explain[0]}: built on {hit.result.built_on or 'another machine'} ({toolchain})"]
        if shared:
            self.shared.hold(result.name, hit.result)
        else:
            self.folder.record(result.name, hit.result, self._program(result.name))
        cache.count(not node)
        self._remember(result.name, result.key)
        return hit.result

    def _explain_miss(self, result: TargetResult, inputs: dict[str, str], model: str = "") -> None:
        if not self.options.explain or result.explain:
            return  # a stale dependency already says why
        last = self._last(result.name) if self.cache is not None else None
        result.explain = keys.explain_changes(last.inputs if last else None, inputs, model=model, program=result.name)

    def _program(self, name: str) -> ProgramPlan | None:
        return next((p for p in self.plan.programs if p.name == name), None)

    def _stored(self, result: TargetResult, action: ActionResult, files: dict[str, Path]) -> None:
        """Save a new result in the cache, publish its files, note it in the record."""
        if self.cache is not None:
            aliases = (keys.elsewhere_key(action.inputs),) if action.kind == "program" else ()
            self.cache.save(action, files, aliases)
            self.cache.count(False)
            self._remember(result.name, action.key)
        result.take(action)
        result.status = Status.BUILT
        if self.shared.group_of(result.name) is not None:
            self.shared.hold(result.name, action, files)
            return
        self.folder.publish(files)
        self.folder.record(result.name, action, self._program(result.name))

    # -- shim libraries -------------------------------------------------------------------------

    def build_shims(self, shim: ShimPlan) -> None:
        from ptebuild.builder.shim_targets import write_shims

        result = self.results[shim.name]
        started = time.monotonic()
        inputs = keys.shim_inputs(shim, self.plan, self.digest_file)
        result.key = keys.action_key(inputs)
        if self._restore(result) is None:
            self._explain_miss(result, inputs)
            action, files = write_shims(shim, self.plan, result.key, inputs, self.folder)
            try:
                self._stored(result, action, files)
            finally:
                shutil.rmtree(next(iter(files.values())).parent, ignore_errors=True)
        result.seconds = time.monotonic() - started
        self.report(shim.name, "done", str(result.status))

    # -- programs -------------------------------------------------------------------------------

    def build_programs(self, programs: list[ProgramPlan]) -> None:
        from ptebuild.backends import get_backend

        jobs = []
        keyed = []
        for program in programs:
            backend = get_backend(program.backend)
            inputs = keys.program_inputs(program, self.plan, self.digest_file, backend)
            self.results[program.name].key = keys.action_key(inputs)
            keyed.append((program, backend, inputs))
        shard_keys = {program.name: self._shard_key(program.name) for program, _, _ in keyed}
        for program, backend, inputs in keyed:
            result = self.results[program.name]
            started = time.monotonic()
            if not in_shard(shard_keys[program.name], self.options.shard):
                del self.results[program.name]
                self.other_shards += 1
                continue
            if self._restore(result, local_only=self._nodes_cache) is not None:
                result.seconds = time.monotonic() - started
                self.report(program.name, "done", str(result.status))
                continue
            # What this machine can do is known before anything is lowered (:mod:`.capabilities`).
            blocked = self._obstacle(program, backend, programs)
            if blocked is not None and self._restore(result, keys.elsewhere_key(inputs)) is not None:
                result.seconds = time.monotonic() - started
                self.report(program.name, "done", f"{result.status} (built on {result.node or 'another machine'})")
                continue
            if blocked is not None:
                result.status = blocked.status
                result.message = self._located(program, f"not in the cache, and {blocked.reason}; {blocked.way_out}")
                self._explain_miss(result, inputs, model=program.model)
                self.report(program.name, "done", str(result.status))
                continue
            from ptebuild.builder.schedule import Job

            jobs.append(Job(program.name, result.key, make_task=self._task_maker(program, result, inputs), data=(program, inputs)))
        if jobs:
            self._run_jobs(jobs)
        self.shared.finish()

    def _obstacle(self, program: ProgramPlan, backend: Backend, programs: list[ProgramPlan]) -> Obstacle | None:
        """Why this machine will not lower ``program`` (:func:`.capabilities.obstacle`), or None.
        The probe's verdicts are read (or found, once per toolchain) for every backend of
        ``programs`` at once, the first time a program needs lowering."""
        from ptebuild.backends import get_backend
        from ptebuild.builder import capabilities

        verdict = None
        if self.options.executor in capabilities.EXECUTORS_ON_THIS_MACHINE and backend.can_build(program.options) is None:
            if self._capabilities is None:
                root = getattr(self.cache, "local_root", None) if self.cache is not None else None
                self._capabilities = capabilities.Capabilities(
                    root, self.digest_file, lambda text: self.report(program.name, "progress", text)
                )
            names = [p.backend for p in programs if get_backend(p.backend).can_build(p.options) is None]
            verdict = self._capabilities.verdicts(names or [program.backend]).get(program.backend)
        return capabilities.obstacle(backend, program.options, program.check_enabled, verdict)

    def _shard_key(self, name: str) -> str:
        """The key a program is sharded by: its own, or its shared-data group's smallest (a group
        is built whole, on one runner)."""
        data = self.shared.group_of(name)
        if data is None:
            return self.results[name].key
        return min(self.results[p].key for p in self.shared.groups[data] if p in self.results)

    def _task_maker(self, program: ProgramPlan, result: TargetResult, inputs: dict[str, str]) -> Callable[[], Task]:
        def make() -> Task:
            from ptebuild.backends import get_backend
            from ptebuild.worker.tasks import Task, TaskFile

            files = tuple(TaskFile(name, digest) for name, digest in keyinputs.files(inputs))
            staging = self.folder.stage(program.name)
            self._job_staging[program.name] = staging
            return Task(
                task_id=program.name,
                key=result.key,
                program=program.name,
                backend=program.backend,
                plan_json=self._plan_json,
                manifest=self.plan.manifest,
                manifest_dir=self.plan.manifest_dir,
                files=files,
                staging=str(staging),
                resources=get_backend(program.backend).resources(program.options),
                debug=self.options.debug,
                inputs=dict(inputs),
                node_cache=self._nodes_cache and program.name not in self._inline_again,
            )

        return make

    def _run_jobs(self, jobs: list[Job]) -> None:
        self._plan_json = self.plan.to_json()
        started_at: dict[str, float] = {}

        def ready(job: Job) -> bool:
            result = self.results[job.name]
            # Another process may have built it while we waited for the lock.
            if self._restore(result, local_only=self._nodes_cache) is not None:
                result.seconds = 0.0
                self.report(job.name, "done", str(result.status))
                return True
            program, inputs = job.data
            self._explain_miss(result, inputs, model=program.model)
            return False

        def started(job: Job) -> None:
            started_at[job.name] = time.monotonic()
            self._submitted[job.name] = self.timings.now()
            program = job.data[0]
            self.report(job.name, "start", f"lowering for {program.backend}")

        def finished(job: Job, event: Event) -> bool | Literal["again"]:
            from ptebuild.builder.schedule import AGAIN
            from ptebuild.insight.stages import Stage, spans_from_json
            from ptebuild.worker.tasks import EventKind, TaskFailure

            result = self.results[job.name]
            program, inputs = job.data
            done_at = self.timings.now()
            submitted = self._submitted.pop(job.name, done_at)
            try:
                if event.kind is EventKind.DONE and event.result is not None:
                    self.timings.task(program.name, submitted, done_at, spans_from_json(event.result.stages))
                    for text in event.result.warnings:
                        self.report(program.name, "warning", text)
                    if event.result.action is None:
                        self._finish(program, result, inputs, event.result)
                        self.timings.span(program.name, Stage.STORE, done_at)
                    elif not self._from_node(program, result, event.result):
                        self._inline_again.add(program.name)
                        return AGAIN
                else:
                    from ptebuild.builder import failure_logs

                    self.timings.task(program.name, submitted, done_at, None)
                    # Every FAILED event carries its failure (Event.failed), every DONE one its result.
                    failure = event.failure or TaskFailure(FailureKind.BUILD, event.text or "the executor sent no result")
                    result.status = Status.FAILED
                    result.message = failure.line(self.plan.manifest, program.name)
                    result.failure = failure.kind
                    # The line says the cause; the whole text waits in the program's log, named on it.
                    result.message += failure_logs.keep(self.folder.path, program.name, result.message, failure.detail)
            finally:
                shutil.rmtree(self._job_staging.pop(job.name), ignore_errors=True)
            result.seconds = time.monotonic() - started_at.get(job.name, time.monotonic())
            self.report(job.name, "done", str(result.status))
            return result.status is not Status.FAILED or self.options.keep_going

        options = dict(self.options.executor_options)
        if self.plan.shims and self.options.executor == "local":
            # Windows CUDA programs link the shim import library this build just wrote.
            options.setdefault("environment", {"PTEBUILD_SHIM_LIBRARY_DIR": str(self.folder.path)})
        self._schedule(self.options.executor, options, jobs, self.cache, ready, started, finished)

    def _expected(self, name: str, stage: str) -> float | None:
        """How long ``stage`` took in the last build of program ``name`` that the cache remembers
        (its action result's stage spans), None if unknown."""
        from ptebuild.insight.stages import Stage, expected_seconds, spans_from_json

        if name not in self._last_stages:
            last = self._last(name)
            self._last_stages[name] = spans_from_json(last.stages) if last is not None else ()
        try:
            return expected_seconds(self._last_stages[name], Stage(stage))
        except ValueError:
            return None

    def _schedule(
        self,
        executor_name: str,
        options: dict[str, Any],
        jobs: list[Job],
        cache: Cache | None,
        ready: Callable[[Job], bool],
        started: Callable[[Job], None],
        finished: Callable[[Job, Event], bool | Literal["again"]],
    ) -> None:
        """Run ``jobs`` on a new executor (closed at once on an error or Ctrl-C); the jobs never
        started (after a failure without --keep-going) are marked skipped."""
        from ptebuild.builder.executors import open_executor
        from ptebuild.builder.schedule import Scheduler

        executor = open_executor(
            executor_name,
            jobs=min(self.options.jobs, len(jobs)),
            report=lambda text: self.report("", "warning", text),
            **options,
        )
        graceful = False
        try:
            left = Scheduler(executor, cache, self.report, ready=ready, started=started, finished=finished,
                             expected=self._expected).run(jobs)
            graceful = True
        finally:
            executor.close(graceful=graceful)
        for job in left:
            self.results[job.name].status = Status.SKIPPED

    # -- --check: lower again elsewhere, compare the bytes ----------------------------------------

    def check_rebuilds(self) -> None:
        """``--check`` (:mod:`.rebuild_check`)."""
        from ptebuild.builder.rebuild_check import check_rebuilds

        check_rebuilds(self)

    def _located(self, program: ProgramPlan, message: str, location: str = "", manifest: str = "") -> str:
        """A failure as one line with the manifest and the location (the program's by default)."""
        from ptebuild.errors import BuildError

        return str(
            BuildError(message, manifest=manifest or self.plan.manifest, location=location or f"programs.{program.name}")
        )

    def _from_node(self, program: ProgramPlan, result: TargetResult, done: TaskResult) -> bool:
        """Fetch what a node found in the shared cache or stored there (``done.action``), every
        blob verified, and publish it as a restore does. False if that could not be done (the
        remote is off here, a blob is gone or wrong: reported): the task then runs again."""
        if self.cache is None or done.action is None:
            return False
        try:
            action = ActionResult.from_json(done.action)
        except (KeyError, TypeError, ValueError):
            return False
        if action.key != result.key or {o.name for o in action.outputs} != set(program.output_names):
            return False
        hit = self.cache.pull(action)
        if hit is None:
            return False
        return self._use(result, hit, node="" if done.cached else (done.node or action.built_on)) is not None

    def _finish(self, program: ProgramPlan, result: TargetResult, inputs: dict[str, str], done: TaskResult) -> None:
        from ptebuild.hashing import hash_file

        names = {o.name for o in done.outputs}
        if names != set(program.output_names):
            result.status = Status.FAILED
            result.message = self._located(
                program, f"the worker produced {sorted(names)}, expected {list(program.output_names)}"
            )
            return
        files = done.files_into(self._job_staging[program.name] / "inline")
        for output in done.outputs:
            if hash_file(files[output.name]) != (output.sha256, output.size):
                result.status = Status.FAILED
                result.message = self._located(program, f"{output.name} changed on its way from the worker")
                return
        action = done.to_action(result.key, program.name, program.backend, inputs)
        result.node = done.node
        self._stored(result, action, files)

    def static_inputs(self) -> dict[str, tuple[str, str, str | None, dict[str, str]]]:
        """Each target's ``(kind, key, backend, inputs)`` as this build would key it, without
        building anything (``--locked`` compares them with the lock first)."""
        found: dict[str, tuple[str, str, str | None, dict[str, str]]] = {}
        for shim in self.plan.shims:
            inputs = keys.shim_inputs(shim, self.plan, self.digest_file)
            found[shim.name] = ("shims", keys.action_key(inputs), None, inputs)
        programs = {}
        for program in self.plan.programs:
            inputs = keys.program_inputs(program, self.plan, self.digest_file, _backend(program))
            programs[program.name] = ("program", keys.action_key(inputs), program.backend, inputs)
        for name, entry in programs.items():
            data = self.shared.group_of(name)
            shard_key = min(programs[p][1] for p in self.shared.groups[data]) if data else entry[1]
            if in_shard(shard_key, self.options.shard):
                found[name] = entry
        return found

    def looked_at(self) -> LookedAt:
        """Files, folders and cache entries that stand for all this build read (:mod:`.noop`)."""
        import sys

        from ptebuild.builder.noop import LookedAt

        files = set(self.touched) | {str(p) for p in own_code.files()}
        files.add(str(Path(self.plan.manifest_dir, Path(self.plan.manifest).name)))
        files.add(str(self.folder.path / "ptebuild.json"))
        files.add(os.path.realpath(sys.executable))
        entries = []
        if self.cache is not None:
            entries = [str(p) for p in self.cache.entry_files([r.key for r in self.results.values()])]
        folders = {str(Path(f).parent) for f in self.touched} | {p or "." for p in sys.path}
        folders |= {str(self.folder.path), self.plan.manifest_dir}
        for program in self.plan.programs:  # a new module in a folder of the model's package
            folders |= keys.source_folders(program, Path(self.plan.manifest_dir))
        return LookedAt(files, folders, entries, self.touched)

    # -- the whole build ------------------------------------------------------------------------

    def run(self) -> list[TargetResult]:
        out = str(self.folder.path)
        for program in self.plan.programs:
            self.results[program.name] = TargetResult(
                name=program.name, kind="program", backend=program.backend, out_dir=out, methods=_method_specs(program)
            )
        for shim in self.plan.shims:
            self.results[shim.name] = TargetResult(name=shim.name, kind="shims", backend=None, out_dir=out)
        self.folder.path.mkdir(parents=True, exist_ok=True)
        self.folder.check_ownership()
        try:
            for shim in self.plan.shims:
                self.build_shims(shim)
            self.build_programs(list(self.plan.programs))
            if self.options.rebuild_check:
                self.check_rebuilds()
            from ptebuild.builder import failure_logs

            for result in self.results.values():
                if result.kind == "program" and result.status in (Status.BUILT, Status.CACHED):
                    failure_logs.forget(self.folder.path, result.name)
            self.judge_budgets()
        finally:
            self.folder.clean()
            self.folder.write_record()
            if self.options.timings:
                self.write_timings()
        return list(self.results.values())

    # -- what is inside each program: figures, budgets, the timeline --------------------------------

    def judge_budgets(self) -> None:
        """Give each delivered program its figures (from the record's entry), and fail those that
        break their budget (:mod:`ptebuild.insight.budget`): one located line per program, the
        first limit broken (the report's ``budget`` lists them all). Cached programs are judged
        as new ones are: a changed budget needs no lowering."""
        from ptebuild.insight.budget import judge
        from ptebuild.insight.program import ProgramInsight

        for program in self.plan.programs:
            result = self.results.get(program.name)
            entry = self.folder.entries.get(program.name)
            if result is None or entry is None or result.status not in (Status.BUILT, Status.CACHED):
                continue
            result.insight = entry.insight
            if program.budget is None:
                continue
            try:
                figures = ProgramInsight.from_json(entry.insight)
            except (KeyError, TypeError, ValueError):
                figures = ProgramInsight()
            overruns = judge(figures, program.budget, program.pte_name)
            if not overruns:
                continue
            result.status = Status.OVER_BUDGET
            result.budget = tuple({"limit": o.limit.location, "message": o.message} for o in overruns)
            first = overruns[0]
            more = f" (and {len(overruns) - 1} more: {', '.join(o.limit.name for o in overruns[1:])})" if len(overruns) > 1 else ""
            result.message = self._located(program, first.message + more, location=first.limit.location)
            self.report(program.name, "done", f"over budget: {first.limit.location}")

    def timeline(self) -> Timeline:
        """The build's timeline so far (:class:`ptebuild.insight.timeline.Timeline`)."""
        from ptebuild.insight.program import ProgramInsight

        figures = {}
        for name, entry in self.folder.entries.items():
            if entry.insight is not None:
                try:
                    figures[name] = ProgramInsight.from_json(entry.insight)
                except (KeyError, TypeError, ValueError):
                    pass
        return self.timings.timeline(self.plan.manifest, list(self.results.values()), figures,
                                     executor=self.options.executor, jobs=self.options.jobs)

    def write_timings(self) -> None:
        """``--timings``: the page and the trace into ``<out>/.ptebuild/`` (a failure to write them is a warning)."""
        from ptebuild.builder.timings import write

        try:
            self.timings_files = write(self.folder.path, self.timeline())
        except OSError as exc:
            self.report("", "warning", f"--timings: cannot write into {self.folder.path}: {exc.strerror or exc}")


def _backend(program: ProgramPlan) -> Backend:
    from ptebuild.backends import get_backend

    return get_backend(program.backend)


def build(plan: BuildPlan, options: BuildOptions, report: Report | None = None) -> list[TargetResult]:
    """Build every target of ``plan``; return one result per target, in manifest order."""
    return Builder(plan, options, report or (lambda *_: None)).run()
