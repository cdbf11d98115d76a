"""A pool of worker processes that survives its workers' crashes.

Unlike :class:`concurrent.futures.ProcessPoolExecutor`, whose every pending future breaks when one
worker dies, a crash here fails only the task that worker was running; the pool starts a new
worker for the tasks that remain. Workers are started lazily, and only as many as there is work.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
from dataclasses import dataclass, field
from multiprocessing.connection import wait

from ptebuild.builder.worker import worker_main


@dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: object
    log_path: str
    task_id: str | None = None
    ready: bool = False
    queued: list = field(default_factory=list)


@dataclass(frozen=True)
class Event:
    task_id: str
    kind: str
    """``"started"`` (the worker finished its imports and took the task), ``"progress"``,
    ``"done"`` or ``"failed"``."""
    payload: object = None
    failure_kind: str = "build"


def _last_words(log_path: str) -> str:
    """The last line a crashed worker printed, as a hint (native crashes print before dying)."""
    try:
        with open(log_path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 4096))
            lines = [line.strip() for line in log.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return f"; it last printed: {lines[-1][:300]}" if lines else ""


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "the worker vanished"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"the worker process crashed: killed by {name}{hint}"
    return f"the worker process exited with code {code}"


class WorkerPool:
    def __init__(self, size: int):
        self.size = max(1, size)
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []

    def _start_worker(self) -> _Worker:
        parent, child = self._context.Pipe()
        fd, log_path = tempfile.mkstemp(prefix="ptebuild-worker-", suffix=".log")
        os.close(fd)
        process = self._context.Process(
            target=worker_main, args=(child, log_path), daemon=True, name="ptebuild-worker"
        )
        process.start()
        child.close()
        worker = _Worker(process=process, conn=parent, log_path=log_path)
        self._workers.append(worker)
        return worker

    def idle_slots(self) -> int:
        busy = sum(1 for w in self._workers if w.task_id is not None)
        return self.size - busy

    def submit(self, task_id: str, task: dict) -> None:
        worker = next((w for w in self._workers if w.task_id is None), None)
        if worker is None:
            if len(self._workers) >= self.size:
                raise RuntimeError("no idle worker")
            worker = self._start_worker()
        worker.task_id = task_id
        if worker.ready:
            worker.conn.send(("lower", task))
        else:
            worker.queued.append(task)

    def poll(self, timeout: float) -> list[Event]:
        """Wait up to ``timeout`` seconds for news from the workers."""
        if not self._workers:
            return []
        waitables = {w.conn: w for w in self._workers}
        waitables.update({w.process.sentinel: w for w in self._workers})
        events: list[Event] = []
        for ready in wait(list(waitables), timeout):
            worker = waitables[ready]
            if worker not in self._workers:
                continue
            events.extend(self._drain(worker))
        return events

    def _drain(self, worker: _Worker) -> list[Event]:
        events = []
        try:
            while worker.conn.poll():
                message = worker.conn.recv()
                kind = message[0]
                if kind == "ready":
                    worker.ready = True
                    if worker.queued:
                        worker.conn.send(("lower", worker.queued.pop()))
                        events.append(Event(worker.task_id, "started"))
                elif kind == "progress":
                    events.append(Event(worker.task_id, "progress", message[1]))
                elif kind == "done":
                    events.append(Event(worker.task_id, "done", message[1]))
                    worker.task_id = None
                elif kind == "failed":
                    events.append(Event(worker.task_id, "failed", message[2], failure_kind=message[1]))
                    worker.task_id = None
        except (EOFError, OSError):
            pass
        if not worker.process.is_alive():
            worker.process.join(timeout=1)
            if worker.task_id is not None:
                message = _describe_exit(worker.process.exitcode) + _last_words(worker.log_path)
                events.append(Event(worker.task_id, "failed", message))
            self._workers.remove(worker)
            _remove(worker.log_path)
        return events

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

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, traceback):
        self.close(graceful=exc_type is None)
