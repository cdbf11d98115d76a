"""The local executor: a pool of worker processes that survives its workers' crashes.

Unlike :class:`concurrent.futures.ProcessPoolExecutor`, whose every pending future breaks when one
worker dies, a crash here fails only the task that worker was running; the pool starts a new
worker for the tasks that remain. Workers are started lazily, and only as many as there is work.

Protocol over a :func:`multiprocessing.Pipe` (pickled tuples):

- parent -> worker: ``("lower", task)`` with ``task`` a :class:`~ptebuild.worker.tasks.Task` as
  JSON, or ``("stop",)`` (the worker exits at once, without the interpreter's teardown);
- worker -> parent: ``("ready",)`` once imports are done; ``("progress", text, stage)`` while working;
  ``("stored", [OutputFile.to_json(), ...])`` once its outputs are in the store, before its check;
  ``("done", TaskResult)`` or ``("failed", TaskFailure.to_json())`` at the end of each task.

A worker that dies (segfault, out of memory, SIGKILL) simply closes its end of the pipe: the
parent fails the one task it was running.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import tempfile
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from types import TracebackType
from typing import Any

from ptebuild.processes import (
    describe_exit,
    die_with_parent,
    exit_without_teardown,
    last_words,
    redirect_output,
    worker_environment,
)
from ptebuild.results import FailureKind
from ptebuild.worker.tasks import Event, EventKind, StagedProgress, Task, TaskFailure


@dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: Connection
    log_path: str
    task_id: str | None = None
    ready: bool = False
    queued: list[dict[str, Any]] = field(default_factory=list)
    payload: dict[str, Any] | None = None
    """The task it runs, as sent (for a retry on a new worker)."""


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class LocalExecutor:
    """``--executor local``: ``jobs`` spawned worker processes on this machine."""

    name = "local"

    def __init__(self, jobs: int = 1, environment: dict[str, str] | None = None, cwd: str | None = None, **_options: Any) -> None:
        """``environment`` and ``cwd``: what the workers start with instead of this process's
        (``ptebuild build --reproduce`` lowers again in a changed environment)."""
        self.size = max(1, jobs)
        self.environment = dict(environment or {})
        self.cwd = cwd
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []
        self._retried: set[str] = set()

    def _start_worker(self) -> _Worker:
        parent, child = self._context.Pipe()
        fd, log_path = tempfile.mkstemp(prefix="ptebuild-worker-", suffix=".log")
        os.close(fd)
        process = self._context.Process(
            target=worker_main, args=(child, log_path, self.cwd), daemon=True, name="ptebuild-worker"
        )
        saved = dict(os.environ)
        environment = worker_environment({**os.environ, **self.environment})
        os.environ.update(environment)  # a spawned interpreter starts with this environment
        try:
            process.start()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        child.close()
        worker = _Worker(process=process, conn=parent, log_path=log_path)
        self._workers.append(worker)
        return worker

    def capacity(self) -> int:
        busy = sum(1 for w in self._workers if w.task_id is not None)
        return self.size - busy

    def submit(self, task: Task) -> None:
        from dataclasses import replace

        from ptebuild.worker.tasks import threads_per_worker

        task_id = task.task_id
        # the workers side by side share the cores (torch's own count in each would oversubscribe them)
        payload = replace(task, threads=threads_per_worker(self.size, environment={**os.environ, **self.environment})).to_json()
        worker = next((w for w in self._workers if w.task_id is None), None)
        if worker is None:
            if len(self._workers) >= self.size:
                raise RuntimeError("no idle worker")
            worker = self._start_worker()
        worker.task_id = task_id
        worker.payload = payload
        if worker.ready:
            worker.conn.send(("lower", payload))
        else:
            worker.queued.append(payload)

    def poll(self, timeout: float) -> list[Event]:
        """Wait up to ``timeout`` seconds for news from the workers."""
        if not self._workers:
            return []
        waitables: dict[Connection | int, _Worker] = {w.conn: w for w in self._workers}
        waitables.update({w.process.sentinel: w for w in self._workers})
        events: list[Event] = []
        for ready in wait(list(waitables), timeout):
            worker = waitables[ready]  # type: ignore[index]  # wait() gives back one of the objects it was given
            if worker not in self._workers:
                continue
            events.extend(self._drain(worker))
        return events

    def _drain(self, worker: _Worker) -> list[Event]:
        events: list[Event] = []
        try:
            while worker.conn.poll():
                message = worker.conn.recv()
                kind = message[0]
                task_id = worker.task_id
                if kind == "ready":
                    worker.ready = True
                    if worker.queued:
                        worker.conn.send(("lower", worker.queued.pop()))
                        if task_id is not None:  # always: a task is queued with its id
                            events.append(Event(task_id, EventKind.STARTED))
                elif task_id is None:
                    continue  # never: a worker reports only on the task it was sent, whose id it holds
                elif kind == "progress":
                    events.append(Event(task_id, EventKind.PROGRESS, str(message[1]), stage=str(message[2]) if len(message) > 2 else ""))
                elif kind == "stored":
                    stored = Event.stored(task_id, message[1] if len(message) > 1 else None)
                    if stored is not None:
                        events.append(stored)
                elif kind == "done":
                    events.append(Event(task_id, EventKind.DONE, result=message[1]))
                    worker.task_id = None
                elif kind == "failed":
                    failure = TaskFailure.from_json(message[1])
                    if failure.kind is FailureKind.STALE and task_id not in self._retried:
                        # A library the worker imported changed on disk: a new worker runs the task.
                        self._retried.add(task_id)
                        events.append(Event(task_id, EventKind.PROGRESS, f"{failure.message}: starting a new worker"))
                        self._replace(worker)
                        return events
                    events.append(Event.failed(task_id, failure))
                    worker.task_id = None
        except (EOFError, OSError):
            pass
        if not worker.process.is_alive():
            worker.process.join(timeout=1)
            if worker.task_id is not None:
                message = describe_exit(worker.process.exitcode) + last_words(worker.log_path)
                events.append(Event.failed(worker.task_id, message))
            self._workers.remove(worker)
            _remove(worker.log_path)
        return events

    def _replace(self, worker: _Worker) -> None:
        """Stop ``worker`` and give its task, again, to a new one."""
        task_id, payload = worker.task_id, worker.payload
        if task_id is None or payload is None:  # never: it is called for a worker running a task
            raise RuntimeError("a worker without a task cannot be replaced")
        worker.task_id = None
        with contextlib.suppress(OSError, BrokenPipeError):
            worker.conn.send(("stop",))
        worker.process.join(timeout=5)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join()
        self._workers.remove(worker)
        _remove(worker.log_path)
        fresh = self._start_worker()
        fresh.task_id, fresh.payload = task_id, payload
        fresh.queued.append(payload)

    def cancel(self, task_id: str) -> None:
        """Kill the worker running ``task_id``; its FAILED event follows from the next poll."""
        for worker in self._workers:
            if worker.task_id == task_id and worker.process.is_alive():
                worker.process.kill()

    def close(self, graceful: bool = True) -> None:
        """Stop the workers: politely after a build, at once after an error or Ctrl-C."""
        for worker in self._workers:
            try:
                worker.conn.send(("stop",))
            except (OSError, BrokenPipeError):
                pass
        for worker in self._workers:
            worker.process.join(timeout=5 if graceful else 0.1)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            _remove(worker.log_path)
        self._workers.clear()

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close(graceful=exc_type is None)


def worker_main(conn: Connection, log_path: str | None = None, cwd: str | None = None) -> None:
    """Entry point of a worker process of the local executor."""
    from ptebuild.worker.execute import execute, prepare_worker

    die_with_parent()
    if cwd:
        os.chdir(cwd)
    if log_path:
        redirect_output(log_path)
    try:
        prepare_worker()
    except BaseException as exc:  # report, then die: the parent fails the task
        failure = TaskFailure(FailureKind.BUILD, f"the worker cannot import torch/executorch: {exc}")
        conn.send(("failed", failure.to_json()))
        return
    conn.send(("ready",))
    while True:
        try:
            message = conn.recv()
        except EOFError:  # the build is gone
            exit_without_teardown()
        if message[0] == "stop":
            exit_without_teardown()
        progress = StagedProgress(lambda text, stage: conn.send(("progress", text, stage)),
                                  stored=lambda outputs: conn.send(("stored", [o.to_json() for o in outputs])))
        outcome = execute(Task.from_json(message[1]), progress)
        if isinstance(outcome, TaskFailure):
            conn.send(("failed", outcome.to_json()))
        else:
            conn.send(("done", outcome))
