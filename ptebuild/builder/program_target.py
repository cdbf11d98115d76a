"""A program's life in one build: its key, the cache, what stops this machine lowering it, its
task, its outcome checked, stored and published.

:class:`ProgramTarget` is a :class:`~ptebuild.builder.target.Target` with what only a program
has: the obstacles of this machine (:mod:`.capabilities`), the :class:`~ptebuild.worker.tasks.Task`
an executor runs (its own plan, its inputs by digest, the store its outputs go into), and what
comes back: a failure, outputs by digest in the build's store (checked against what the program
writes, then stored and published), or, from a node of an executor that caches on its nodes, a
result in the shared cache (fetched, every blob verified). Nothing here imports torch or executorch.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Literal

from ptebuild import keyinputs
from ptebuild.backends import bound_backend
from ptebuild.builder import keys
from ptebuild.builder.target import Target
from ptebuild.errors import CorruptObject, StoreError
from ptebuild.results import ActionResult, FailureKind, OutputFile, Status, TargetResult

if TYPE_CHECKING:
    from ptebuild.builder.capabilities import Obstacle
    from ptebuild.builder.context import BuildContext
    from ptebuild.builder.publish import Publisher
    from ptebuild.builder.schedule import Job
    from ptebuild.insight.stages import StageSpan
    from ptebuild.plan import ProgramPlan
    from ptebuild.worker.tasks import Event, Task, TaskFailure, TaskResult


def method_specs(program: ProgramPlan) -> tuple[dict[str, object], ...]:
    """The methods as a target's result reports them (names, inputs, dims)."""
    return tuple(
        {
            "name": m.name,
            "inputs": [{"name": i.name, "shape": list(i.shape), "dtype": i.dtype} for i in m.inputs],
            "dims": [{"name": d.name, "min": d.min, "max": d.max} for d in m.dims],
        }
        for m in program.methods
    )


class ProgramTarget(Target):
    """One program of a build (see the module's docstring)."""

    def __init__(self, context: BuildContext, publisher: Publisher, program: ProgramPlan) -> None:
        """Key ``program`` (its files digested); its result is ``context.results[program.name]``
        (:meth:`new_result`)."""
        result = context.results[program.name]
        super().__init__(context, publisher, result, keys.program_inputs(program, context.plan, context.digest_file, context.cache))
        self.program = program
        self.backend = bound_backend(program).backend
        self.started = time.monotonic()
        self.direct = False
        """Its node's result in the shared cache could not be fetched: the task runs again, its
        outputs sent to the build's store."""
        self.submitted_at = 0.0
        """When its task was last submitted, on the build's clock (:class:`~.timings.Timings`)."""
        self._last_stages: tuple[StageSpan, ...] | None = None

    @staticmethod
    def new_result(context: BuildContext, program: ProgramPlan) -> TargetResult:
        """The program's result, pending, noted in the build's results."""
        result = TargetResult(name=program.name, kind="program", backend=program.backend,
                              out_dir=str(context.folder.path), methods=method_specs(program))
        context.results[program.name] = result
        return result

    # -- before anything is lowered ----------------------------------------------------------

    def restore_elsewhere(self) -> bool:
        """Restore what a machine with another toolchain built (looked up without this one's)."""
        return self.restore(keys.elsewhere_key(self.inputs))

    def obstacle(self, probe: bool = False) -> Obstacle | None:
        """Why this machine will not lower the program (:func:`.capabilities.obstacle`), or None:
        its backend's cheap facts, and the probe's verdict where one is kept for this toolchain.
        ``probe``: find the verdict if none is kept (a fresh interpreter, once per toolchain).

        Before a program is lowered the probe is not run: a program that lowers and passes its
        check proves what the probe would, and the probe's ten-odd seconds of imports would come
        before any lowering. It runs when a program fails (:meth:`finished`), to tell a toolchain
        that cannot lower or check that backend here from a program that is wrong."""
        from ptebuild.builder import capabilities

        verdict = None
        options = self.program.options
        if self.context.options.executor in capabilities.EXECUTORS_ON_THIS_MACHINE and self.backend.can_build(options) is None:
            kept = self.context.capabilities(self.name)
            backend = self.program.backend
            verdict = kept.verdicts([backend])[backend] if probe else kept.known().get(backend)
        return capabilities.obstacle(self.backend, options, self.program.check_enabled, verdict)

    def unknown_toolchain(self) -> bool:
        """True if no probe's verdict is kept for the program's backend on this toolchain."""
        from ptebuild.builder import capabilities

        if self.context.options.executor not in capabilities.EXECUTORS_ON_THIS_MACHINE:
            return False
        return self.program.backend not in self.context.capabilities(self.name).known()

    def blocked(self, obstacle: Obstacle) -> None:
        """Report the program as this machine cannot deliver it, with the way out."""
        self.result.status = obstacle.status
        self.result.message = self.context.located(self.name, f"not in the cache, and {obstacle.reason}; {obstacle.way_out}")
        self.explain_miss(model=self.program.model)

    # -- its task -------------------------------------------------------------------------------

    def expected_seconds(self) -> float | None:
        """How long its lowering took when it was last built with this cache, if it was."""
        last = self.context.last(self.name)
        return last.lower_seconds if last is not None and last.lower_seconds > 0 else None

    def expected_stage(self, stage: str) -> float | None:
        """How long ``stage`` (a :class:`~ptebuild.insight.stages.Stage` value) took in the last
        build of the program that the cache remembers (its action result's stage spans), None if
        unknown: what a progress line compares the stage's time with."""
        from ptebuild.insight.stages import Stage, expected_seconds

        if self._last_stages is None:
            last = self.context.last(self.name)
            self._last_stages = last.stages if last is not None else ()
        try:
            return expected_seconds(self._last_stages, Stage(stage))
        except ValueError:
            return None

    def job(self) -> Job:
        from ptebuild.builder.schedule import Job

        return Job(self.name, self.key, make_task=self.make_task, data=self)

    def make_task(self) -> Task:
        """The task that lowers and checks the program, its outputs into the build's store."""
        from ptebuild.worker.tasks import Task, TaskFile

        context = self.context
        files = tuple(TaskFile(name, digest) for name, digest in keyinputs.files(self.inputs))
        return Task(
            task_id=self.name,
            key=self.key,
            plan=self.program,
            manifest=context.plan.manifest,
            manifest_dir=context.plan.manifest_dir,
            store=str(context.store().root),
            files=files,
            resources=self.backend.resources(self.program.options),
            debug=context.options.debug,
            inputs=dict(self.inputs),
            node_cache=context.nodes_cache and not self.direct,
        )

    def ready(self) -> bool:
        """True if another process built it while this one waited for its lock (restored)."""
        if self.restore(local_only=self.context.nodes_cache):
            self.result.seconds = 0.0
            self.context.report(self.name, "done", str(self.result.status))
            return True
        self.explain_miss(model=self.program.model)
        return False

    def submitted(self) -> None:
        self.started = time.monotonic()
        self.submitted_at = self.context.timings.now()
        self.context.report(self.name, "start", f"lowering for {self.program.backend}")

    def stored(self, outputs: tuple[OutputFile, ...]) -> None:
        """Its task's outputs are in the build's store, its check still running: the publisher
        copies them towards the output folder meanwhile (in place only once the check passed).
        Nothing if they are not all its outputs' names, or not in the build's store (a node's)."""
        store = self.context.store()
        if any(o.name not in self.program.output_names or store.size(o.sha256) != o.size for o in outputs):
            return
        self.publisher.copy_ahead(self.name, outputs, store)

    def finished(self, event: Event) -> bool | Literal["again"]:
        """Take its task's outcome; whether the build goes on (:data:`.schedule.AGAIN`: run the
        task once more)."""
        from ptebuild.builder.schedule import AGAIN
        from ptebuild.insight.stages import Stage
        from ptebuild.worker.tasks import EventKind, TaskFailure

        timings = self.context.timings
        done_at = timings.now()
        if event.kind is not EventKind.DONE or event.result is None or event.result.action is not None:
            self.publisher.discard(self.name)  # copied ahead, and not its result's to publish
        if event.kind is EventKind.DONE and event.result is not None:
            timings.task(self.name, self.submitted_at, done_at, event.result.stages)
            for text in event.result.warnings:
                self.context.report(self.name, "warning", text)
            if event.result.action is None:
                self.take(event.result)
                timings.span(self.name, Stage.STORE, done_at)
            elif not self.from_node(event.result):
                self.direct = True
                return AGAIN
        else:
            timings.task(self.name, self.submitted_at, done_at, None)
            # Every FAILED event carries its failure (Event.failed), every DONE one its result.
            failure = event.failure or TaskFailure(FailureKind.BUILD, event.text or "the executor sent no result")
            if failure.kind is FailureKind.STORE and self.context.store_failed(StoreError(failure.message)):
                return AGAIN  # a full or read-only cache: once more, into the build's own store
            # The probe's verdict, found now (the first failure on an unknown toolchain) or by a program
            # that failed before this one: programs stopped by one cause get one status, whichever came first.
            obstacle = self.obstacle(probe=self.unknown_toolchain()) if failure.kind is not FailureKind.MANIFEST else None
            if obstacle is None:
                self.fail(failure)
            elif not self.restore_elsewhere():  # this machine cannot lower or check it: as if known before
                self.blocked(obstacle)
        self.publisher.discard(self.name)  # copied ahead and not published (its outputs were refused)
        self.result.seconds = time.monotonic() - self.started
        self.context.report(self.name, "done", str(self.result.status))
        # A manifest of a release that passed inputs by position: the build goes on, to name every rename at once.
        return self.result.status is not Status.FAILED or self.context.options.keep_going or bool(self.result.renames)

    def fail(self, failure: TaskFailure) -> None:
        from ptebuild.builder import failure_logs

        result = self.result
        result.status = Status.FAILED
        result.message = failure.line(self.context.plan.manifest, self.name)
        result.failure = failure.kind
        result.renames = failure.renames
        # The line says the cause; the whole text waits in the program's log, named on it. Not for
        # a mistake in the manifest that ptebuild found itself (no exception caused it): its line is
        # all there is to say, and no folder is made for it. A factory whose module fails to import
        # keeps its log: the traceback through the user's code says where.
        caused = any(words in failure.detail for words in ("was the direct cause of", "During handling of"))
        if failure.kind is not FailureKind.MANIFEST or caused:
            result.message += failure_logs.keep(self.context.folder.path, self.name, result.message, failure.detail)

    def take(self, done: TaskResult) -> None:
        """A lowering's outputs, by digest in the build's store: the files the program writes,
        each there whole; stored in the cache and published."""
        names = {o.name for o in done.outputs}
        if names != set(self.program.output_names):
            self._failed(f"the worker produced {sorted(names)}, expected {list(self.program.output_names)}")
            return
        store = self.context.store()
        for output in done.outputs:
            if store.size(output.sha256) != output.size:
                self._failed(f"{output.name} is not in the build's store as the worker named it ({output.sha256[:12]}..., "
                             f"{output.size} bytes)")
                return
        action = done.to_action(self.key, self.name, self.program.backend, self.inputs)
        self.result.node = done.node
        try:
            self.store(action)
        except (CorruptObject, StoreError) as exc:
            self._failed(f"its outputs could not be read back from the build's store: {exc}")

    def from_node(self, done: TaskResult) -> bool:
        """Fetch what a node found in the shared cache or stored there (``done.action``), every
        blob verified, and publish it as a restore does. False if that could not be done (the
        remote is off here, a blob is gone or wrong: reported): the task then runs again."""
        cache = self.context.cache
        if cache is None or done.action is None:
            return False
        try:
            action = ActionResult.from_json(done.action)
        except (KeyError, TypeError, ValueError):
            return False
        if action.key != self.key or {o.name for o in action.outputs} != set(self.program.output_names):
            return False
        hit = cache.pull(action)
        if hit is None:
            return False
        return self.use(hit, node="" if done.cached else (done.node or action.built_on))

    def _failed(self, message: str) -> None:
        self.result.status = Status.FAILED
        self.result.message = self.context.located(self.name, message)
