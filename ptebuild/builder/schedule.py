"""The scheduling loop: hand tasks to an executor, one lowering per key across processes.

For each job the loop takes the key's lock in the local cache without waiting (another
ptebuild process holding it is lowering the same program: the job is retried a little later,
and usually finds that process's result), asks ``ready(job)`` whether the cache has it by now,
and otherwise submits its task. Events come back from the executor; ``finished(job, event)``
is called for each DONE or FAILED one, and may send the job round once more (:data:`AGAIN`).
Long work shows life: a program silent for :data:`HEARTBEAT_SECONDS` gets a "still ..." line;
where a previous build of the program left its stage timings in the cache (``expected``), the
line and the line that starts a stage also say how long that stage took then, and how far along
it is now ("still lowering for xnnpack (45s; lowering 32s of ~40s expected, 80%)").
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ptebuild.builder.executors import Executor
from ptebuild.insight.stages import share_text
from ptebuild.worker.tasks import Event, EventKind, Task

if TYPE_CHECKING:
    from ptebuild.store.frontend import Cache

LOCK_RETRY_SECONDS = 0.25
HEARTBEAT_SECONDS = 15.0
AGAIN: Literal["again"] = "again"
"""What ``finished`` returns for a job whose result could not be used (a node stored it in the
shared cache, and this machine could not fetch it): the job runs once more, its task made anew."""


@dataclass
class Job:
    name: str
    key: str
    make_task: Callable[[], Task]
    """Builds the task when it is submitted (stages a folder, reads files)."""
    data: Any = None


class Scheduler:
    def __init__(
        self,
        executor: Executor,
        cache: Cache | None,
        report: Callable[[str, str, str], None],
        *,
        ready: Callable[[Job], bool],
        started: Callable[[Job], None],
        finished: Callable[[Job, Event], bool | Literal["again"]],
        expected: Callable[[str, str], float | None] | None = None,
        stored: Callable[[Job, Event], None] | None = None,
    ) -> None:
        """``ready(job)``: True if the job is done already (restored); ``finished(job, event)``:
        True if the build goes on after it (False stops submitting: a failure without --keep-going),
        :data:`AGAIN` to run the job once more. ``expected(job name, stage)``: how many seconds
        the stage took in the program's last build (None: unknown). ``stored(job, event)``: the
        job's outputs are in the store before its check (a STORED event), its result to come."""
        self.executor = executor
        self.cache = cache
        self.report = report
        self.ready = ready
        self.started = started
        self.finished = finished
        self.expected = expected or (lambda _name, _stage: None)
        self.stored = stored or (lambda _job, _event: None)
        self._stage: dict[str, tuple[str, float]] = {}
        """Job name -> the stage its worker said it is in, and since when."""

    def run(self, jobs: list[Job]) -> list[Job]:
        """Run ``jobs``; return those never started (after a failure without --keep-going)."""
        todo = deque(jobs)
        deferred: list[tuple[float, Job]] = []
        running: dict[str, tuple[Job, Any]] = {}
        heartbeat: dict[str, tuple[float, str, float]] = {}
        stopping = False
        while todo or deferred or running:
            now = time.monotonic()
            for item in [d for d in deferred if d[0] <= now]:
                deferred.remove(item)
                todo.append(item[1])
            while todo and not stopping and self.executor.capacity() > 0:
                job = todo.popleft()
                lock = self.cache.try_lock(job.key) if self.cache is not None else _NoLock()
                if lock is None:
                    if not any(d[1] is job for d in deferred):
                        self.report(job.name, "progress", "waiting for another ptebuild process")
                    deferred.append((now + LOCK_RETRY_SECONDS, job))
                    continue
                try:
                    done = self.ready(job)
                except BaseException:
                    lock.release()
                    raise
                if done:
                    lock.release()
                    continue
                self.executor.submit(job.make_task())
                self.started(job)
                running[job.name] = (job, lock)
                heartbeat[job.name] = (time.monotonic(), "starting a worker", time.monotonic())
            if stopping and not running:
                break
            if not running and not todo and deferred:
                time.sleep(max(0.0, min(d[0] for d in deferred) - time.monotonic()))
                continue
            for name, (began, stage, last) in list(heartbeat.items()):
                if name in running and now - last >= HEARTBEAT_SECONDS:
                    self.report(name, "progress", f"still {stage} ({now - began:.0f}s{self._share(name, now)})")
                    heartbeat[name] = (began, stage, now)
            for event in self.executor.poll(0.2):
                if event.task_id not in running:
                    continue
                if event.kind is EventKind.PROGRESS:
                    began = heartbeat.get(event.task_id, (time.monotonic(),))[0]
                    heartbeat[event.task_id] = (began, event.text, time.monotonic())
                    self.report(event.task_id, "progress", event.text + self._stage_began(event))
                elif event.kind is EventKind.STORED:
                    self.stored(running[event.task_id][0], event)
                elif event.kind in (EventKind.DONE, EventKind.FAILED):
                    job, lock = running.pop(event.task_id)
                    heartbeat.pop(event.task_id, None)
                    self._stage.pop(event.task_id, None)
                    try:
                        go_on = self.finished(job, event)
                    finally:
                        lock.release()
                    if go_on == AGAIN:
                        todo.appendleft(job)
                    elif not go_on:
                        stopping = True
            if stopping and not running:
                break
        return list(todo) + [job for _when, job in deferred]


    def _stage_began(self, event: Event) -> str:
        """Note the stage a progress event is in; when it begins one that took a while last time,
        what the line gets at its end (`` (~40s last time)``)."""
        if not event.stage:
            return ""
        current = self._stage.get(event.task_id)
        if current is not None and current[0] == event.stage:
            return ""
        self._stage[event.task_id] = (event.stage, time.monotonic())
        expected = self.expected(event.task_id, event.stage)
        return f" (~{expected:.0f}s last time)" if expected is not None and expected >= 1 else ""

    def _share(self, name: str, now: float) -> str:
        """``; lowering 32s of ~40s expected, 80%`` for a job whose stage took a known time last time."""
        current = self._stage.get(name)
        if current is None:
            return ""
        stage, since = current
        expected = self.expected(name, stage)
        return f"; {stage} {share_text(now - since, expected)}" if expected is not None else ""


class _NoLock:
    def release(self) -> None:
        pass


def run_jobs(
    executor_name: str,
    options: dict[str, Any],
    jobs: list[Job],
    cache: Cache | None,
    report: Callable[[str, str, str], None],
    *,
    workers: int,
    ready: Callable[[Job], bool],
    started: Callable[[Job], None],
    finished: Callable[[Job, Event], bool | Literal["again"]],
    expected: Callable[[str, str], float | None] | None = None,
    stored: Callable[[Job, Event], None] | None = None,
) -> list[Job]:
    """Run ``jobs`` on a new executor of ``executor_name`` with ``options`` and at most
    ``workers`` workers (closed at once on an error or Ctrl-C); return the jobs never started
    (after a failure without --keep-going). ``expected``, ``stored``: as :class:`Scheduler`'s."""
    from ptebuild.builder.executors import open_executor

    executor = open_executor(
        executor_name,
        jobs=min(workers, len(jobs)),
        report=lambda text: report("", "warning", text),
        **options,
    )
    graceful = False
    try:
        left = Scheduler(executor, cache, report, ready=ready, started=started, finished=finished,
                         expected=expected, stored=stored).run(jobs)
        graceful = True
    finally:
        executor.close(graceful=graceful)
    return left
