"""The ``daemon`` executor: hands tasks to the warm worker server of this toolchain.

The server (:mod:`ptebuild.daemon.server`) keeps torch and executorch imported between builds and
forks a fresh child per task, so a rebuild after an edit skips the 10-odd seconds of imports.
This client finds it at ``<cache>/workers/<toolchain-id>.sock``; if none answers, it starts one
(detached; at most one per socket, however many builds start at once) and waits for it, while
:meth:`DaemonExecutor.poll` keeps the build loop alive. Nothing here imports torch.

If the server dies with tasks running (``kill -9``, out of memory), each task is retried once on
a new server; a task whose second server dies too fails with one line naming the server's log.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import socket
import subprocess
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ptebuild.daemon import protocol
from ptebuild.processes import last_line, pid_alive
from ptebuild.worker.tasks import Event, EventKind, Task, TaskFailure, TaskResult

START_SECONDS = 180.0
"""How long a new server may take to import the toolchain and listen."""
ATTEMPTS = 2
"""A task is tried on at most this many servers (the first one, and a new one after a crash)."""





def retire_idle_servers(keep: Path) -> list[int]:
    """Stop the idle servers of other toolchains beside ``keep`` (a ``pip install`` or an edit of
    ptebuild made them stale: nothing will use them again); return their pids.

    A server with a client or a task is left alone; it idles out by itself.
    """
    stopped = []
    for path in keep.parent.glob("*.sock"):
        if path == keep:
            continue
        try:
            with protocol.connect(path, timeout=1) as sock:
                status = protocol.request(sock, {"op": "status"}, timeout=2)
                if status.get("op") == "status" and not status.get("clients") and not status.get("running") \
                        and not status.get("queued"):
                    protocol.request(sock, {"op": "stop"}, timeout=2)
                    stopped.append(int(status.get("pid") or 0))
        except OSError:
            continue
    return stopped


class DaemonExecutor:
    """Runs tasks on the warm worker server of this toolchain (see the module's docstring)."""

    name = "daemon"

    def __init__(self, jobs: int = 1, cache_dir: Path | None = None, report: Callable[[str], None] | None = None,
                 idle: float | None = None, **_options: Any) -> None:
        from ptebuild.store import default_cache_dir

        self.jobs = max(1, jobs)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.report = report or (lambda _text: None)
        self.idle = idle
        self.sock_path = protocol.socket_path(self.cache_dir)
        self.log_path = protocol.sibling(self.sock_path, ".log")
        self._sock: socket.socket | None = None
        self._reader = protocol.Reader()
        self._waiting: deque[Task] = deque()
        """Submitted, not yet handed to a server."""
        self._sent: dict[str, Task] = {}
        self._attempts: dict[str, int] = {}
        self._start_lock: int | None = None
        self._start_deadline = 0.0
        self._server_pid = 0
        self._announced = False
        self._stale = ""
        """Why the connected server takes no more of our tasks (it retired): the tasks it still
        runs finish there, the others wait for a new server."""

    # -- the protocol's methods -----------------------------------------------------------------

    def capacity(self) -> int:
        return self.jobs - len(self._waiting) - len(self._sent)

    def submit(self, task: Task) -> None:
        from dataclasses import replace

        from ptebuild.worker.tasks import threads_per_worker

        self._attempts[task.task_id] = self._attempts.get(task.task_id, 0) + 1
        # this build's workers side by side share the cores (torch's own count in each would oversubscribe them)
        self._waiting.append(replace(task, threads=threads_per_worker(self.jobs)))

    def poll(self, timeout: float) -> list[Event]:
        deadline = time.monotonic() + max(0.0, timeout)
        events: list[Event] = []
        if not self._waiting and not self._sent:
            time.sleep(max(0.0, timeout))
            return events
        if self._stale and self._sock is not None and not self._sent:
            self._hang_up()  # the stale server has nothing of ours left: on to a new one
        if self._sock is None:
            self._connect(events)
        if self._sock is not None and not self._stale:
            self._send_waiting(self._sock, events)
        if self._sock is None:
            if not events:
                time.sleep(max(0.0, min(0.1, deadline - time.monotonic())))
            return events
        remaining = max(0.0, deadline - time.monotonic())
        try:
            ready, _, _ = select.select([self._sock], [], [], 0 if events else remaining)
            if ready:
                data = self._sock.recv(1 << 20)
                if not data:
                    raise ConnectionResetError("the worker server hung up")
                for message in self._reader.feed(data):
                    event = self._event(message)
                    if event is not None:
                        events.append(event)
        except OSError as exc:
            self._lost(events, exc)
        return events

    def cancel(self, task_id: str) -> None:
        for task in [t for t in self._waiting if t.task_id == task_id]:
            self._waiting.remove(task)
        if task_id in self._sent and self._sock is not None:
            with contextlib.suppress(OSError):
                protocol.send(self._sock, {"op": "cancel", "task_id": task_id})

    def _hang_up(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
        self._stale = ""

    def close(self, graceful: bool = True) -> None:
        """Hang up: the server kills whatever this client still had running, and stays warm."""
        self._hang_up()
        self._release_start_lock()
        self._waiting.clear()
        self._sent.clear()

    # -- connecting -----------------------------------------------------------------------------

    def _try_connect(self) -> socket.socket | None:
        try:
            sock = protocol.connect(self.sock_path, timeout=5)
        except OSError:
            return None
        try:
            protocol.hello(sock, timeout=10)
        except OSError:
            sock.close()
            return None
        sock.setblocking(True)
        sock.settimeout(30)
        return sock

    def _connect(self, events: list[Event]) -> None:
        """Connect to the server, starting one if none answers; never waits long."""
        sock = self._try_connect()
        if sock is None:
            self._start_or_wait(events)
            return
        self._sock = sock
        self._reader = protocol.Reader()
        self._release_start_lock()

    def _start_or_wait(self, events: list[Event]) -> None:
        now = time.monotonic()
        if self._start_lock is None:
            try:
                self.sock_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                fd = os.open(protocol.sibling(self.sock_path, ".start"), os.O_RDWR | os.O_CREAT, 0o600)
            except OSError as exc:  # a read-only or full cache folder
                self._fail_waiting(events, f"cannot start the warm worker server in {self.sock_path.parent}: "
                                           f"{exc.strerror or exc}")
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)  # another build is starting it: wait for the socket
                if not self._announced:
                    self._announced = True
                    self._progress(events, "waiting for the warm worker server another build is starting")
                if self._start_deadline == 0.0:
                    self._start_deadline = now + START_SECONDS
                elif now > self._start_deadline:
                    self._fail_waiting(events, "the warm worker server did not start in time")
                return
            self._start_lock = fd
            sock = self._try_connect()  # it may have come up while we took the lock
            if sock is not None:
                self._sock = sock
                self._release_start_lock()
                return
            from ptebuild.daemon.launch import start_detached

            try:
                self._server_pid = start_detached(self.sock_path, self.idle)
            except (OSError, ValueError, subprocess.SubprocessError) as exc:
                self._fail_waiting(events, f"cannot start the warm worker server: {exc}")
                return
            self._start_deadline = now + START_SECONDS
            self._progress(events, "starting the warm worker server (imports torch once)")
            retire_idle_servers(self.sock_path)
            return
        if self._server_pid and not pid_alive(self._server_pid):
            holder = 0  # ours gave way to a server another build started: wait for that one
            with contextlib.suppress(OSError, ValueError):
                holder = int(protocol.sibling(self.sock_path, ".pid").read_text().strip())
            if holder and holder != self._server_pid and pid_alive(holder):
                self._server_pid = holder
            else:
                self._fail_waiting(events, "the warm worker server exited while starting")
        elif now > self._start_deadline:
            self._fail_waiting(events, f"the warm worker server did not listen within {START_SECONDS:.0f}s")

    def _release_start_lock(self) -> None:
        if self._start_lock is not None:
            os.close(self._start_lock)
            self._start_lock = None
        self._start_deadline = 0.0
        self._announced = False

    def _fail_waiting(self, events: list[Event], why: str) -> None:
        last = last_line(self.log_path)
        message = f"{why} (log: {self.log_path}{'; it last printed: ' + last if last else ''}); build with --no-daemon"
        for task in self._waiting:
            events.append(Event.failed(task.task_id, message))
        self._waiting.clear()
        self._release_start_lock()

    def _progress(self, events: list[Event], text: str) -> None:
        for task in self._waiting:
            events.append(Event(task.task_id, EventKind.PROGRESS, text))

    # -- talking --------------------------------------------------------------------------------

    def _send_waiting(self, sock: socket.socket, events: list[Event]) -> None:
        try:
            while self._waiting:
                task = self._waiting[0]
                protocol.send(sock, {"op": "submit", "task": task.to_json(), "cwd": os.getcwd(),
                                           "env": dict(os.environ)})
                self._sent[task.task_id] = self._waiting.popleft()
        except OSError as exc:
            self._lost(events, exc)

    def _event(self, message: dict[str, Any]) -> Event | None:
        task_id = message.get("task_id")
        if task_id not in self._sent:
            return None
        op = message["op"]
        if op == "started":
            return Event(task_id, EventKind.STARTED)
        if op == "progress":
            return Event(task_id, EventKind.PROGRESS, str(message.get("text", "")), stage=str(message.get("stage") or ""))
        if op == "stored":
            return Event.stored(task_id, message.get("outputs"))
        if op == "done":
            del self._sent[task_id]
            try:
                result = TaskResult.from_json(message["result"])
            except (KeyError, TypeError, ValueError) as exc:
                return Event.failed(task_id, f"the warm worker server sent a bad result: {exc}")
            return Event(task_id, EventKind.DONE, result=result)
        if op == "retry":  # the server is stale (a library it imported changed): a new one runs it
            self._waiting.appendleft(self._sent.pop(task_id))
            self._stale = str(message.get("reason") or "a library it imported changed")
            return Event(task_id, EventKind.PROGRESS, f"the warm worker server is stale ({self._stale}): "
                                                      "starting a new one")
        if op == "failed":
            del self._sent[task_id]
            return Event.failed(task_id, TaskFailure.from_json(message.get("failure")))
        return None

    def _lost(self, events: list[Event], exc: BaseException) -> None:
        """The server went away: retry its tasks once on a new server, fail those already retried."""
        if self._sock is not None:  # always: it is lost while talking
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = None
        self._stale = ""
        for task_id, task in list(self._sent.items()):
            del self._sent[task_id]
            if self._attempts.get(task_id, 1) < ATTEMPTS:
                self._attempts[task_id] = self._attempts.get(task_id, 1) + 1
                self._waiting.append(task)
                self.report(f"{task_id}: the warm worker server died while building it ({exc}); retrying once")
                events.append(Event(task_id, EventKind.PROGRESS, "the warm worker server died; retrying on a new one"))
            else:
                events.append(Event.failed(
                    task_id,
                    f"the warm worker server died while building it, twice (killed, or out of memory?); "
                    f"see {self.log_path}, or build with --no-daemon",
                ))
