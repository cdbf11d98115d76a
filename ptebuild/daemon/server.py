"""The warm worker server: imports torch and executorch once, then forks a child per task.

Started by the first build that needs it (:func:`start_detached`, ``python -m
ptebuild.daemon.server --socket PATH``), it detaches (``setsid``, its output in ``<id>.log``),
takes the ``<id>.lock`` flock (a second server for the same socket exits), imports the toolchain
(:func:`ptebuild.worker.execute.prepare_worker`), then listens on its socket
(:mod:`ptebuild.daemon.protocol`). It exits when it has had no client and no task for
``--idle`` seconds (``PTEBUILD_DAEMON_IDLE``, default 300), on ``SIGTERM`` or on a stop request.

Isolation: every task runs in a child ``fork()``-ed from the warm process. The child shares the
imported toolchain copy-on-write, starts from the module cache of a process that never imported
user code (an edited model is always imported fresh), and its crash or kill ends only that task.
The parent runs torch only on one thread, so no OpenMP pool exists to be broken by the fork (the
idle native thread that ``import torch`` starts is the same one DataLoader workers fork over):
once, before it serves, for what every child's lowering would otherwise repeat (XNNPACK's pattern
graphs, 3 to 4 s a program: :func:`warm_before_forking`, each backend's ``warm``);
:func:`fork_is_safe` refuses to fork if Python threads, native threads beyond the imports' or CUDA
were started (if the warm-up left one, every task runs in a fresh interpreter instead). Children die with
the server (``PR_SET_PDEATHSIG``). A child whose resident memory passes ``PTEBUILD_DAEMON_MAX_RSS``
(bytes, or with K/M/G suffix; default 80% of the machine's memory) is killed and its task failed.

A task whose backend does not survive ``fork()`` (``Backend.forks_safely``: CUDA, whose driver
refuses a child forked from a process where torch has asked it anything) runs in a fresh
interpreter instead (:mod:`ptebuild.daemon.fresh_child`): same pipe, log, memory limit and
death with the server, but it imports the toolchain itself. ``PTEBUILD_DAEMON_FRESH=1`` does that
for every task.

Never stale: before it starts a task, the server checks that every distribution it imported
(numpy, torchao, sympy... as well as torch and executorch) is still installed as it was
(:func:`ptebuild.worker.execute.stale_toolchain`). If one changed, it retires: it gives up its
socket and lock at once, answers ``retry`` for every task it has not started (the client hands
them to a new server, which imports what is installed now), and exits once its running tasks
are done. The socket's name covers only what can be read without importing (Python,
``PYTHONPATH``, torch, executorch, ptebuild); this covers the rest.

At most ``PTEBUILD_DAEMON_JOBS`` children run at once (default: the number of cores); each client
also keeps its own ``--jobs``. Tasks wait in one queue, first come first served.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import selectors
import signal
import socket
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptebuild.daemon import protocol
from ptebuild.daemon.children import (
    default_max_rss,
    fork_is_safe,
    needs_fresh_interpreter,
    run_child,
    spawn_fresh,
    sweep_log_dirs,
    warm_before_forking,
)
from ptebuild.daemon.launch import take_lock
from ptebuild.processes import describe_wait_status, die_with_parent, last_words, redirect_output, rss_bytes
from ptebuild.sizes import format_size, parse_size

if TYPE_CHECKING:
    import subprocess

CHECK_SECONDS = 0.25
"""How often memory and idle time are looked at."""


@dataclass
class _Client:
    sock: socket.socket
    reader: protocol.Reader = field(default_factory=protocol.Reader)
    pid: int = 0
    greeted: bool = False


@dataclass
class _Child:
    pid: int
    pipe: int
    client: _Client
    task_id: str
    log_path: str
    reader: protocol.Reader = field(default_factory=protocol.Reader)
    finished: bool = False
    killed_for: str = ""
    process: subprocess.Popen[bytes] | None = None
    """The process of a fresh-interpreter child (None for a forked one)."""


class Server:
    def __init__(self, sock_path: Path, idle: float, jobs: int, max_rss: int, lock: int | None = None):
        self.sock_path = sock_path
        self.lock = lock
        self.idle = idle
        self.jobs = max(1, jobs)
        self.max_rss = max_rss
        self.started = time.time()
        self.tasks_run = 0
        self.selector = selectors.DefaultSelector()
        self.clients: list[_Client] = []
        self.children: dict[int, _Child] = {}  # pid -> child
        self.queue: deque[tuple[_Client, dict[str, Any]]] = deque()
        self.listener: socket.socket | None = None
        self.last_busy = time.monotonic()
        self.stopping = False
        self.retired = ""
        """Why this server takes no more tasks (a library it imported changed on disk): it has
        given up its socket and lock to a new server, and exits once its running tasks are done."""
        sweep_log_dirs(sock_path.parent)
        self.log_dir = Path(tempfile.mkdtemp(prefix=f"children-{os.getpid()}-", dir=sock_path.parent))

    # -- the loop -------------------------------------------------------------------------------

    def serve(self) -> None:
        self.listener = protocol.listen(self.sock_path)
        self._inode = os.stat(self.sock_path).st_ino
        self.selector.register(self.listener, selectors.EVENT_READ, ("listener", None))
        print(f"ptebuild worker server {os.getpid()} listening on {self.sock_path}", flush=True)
        try:
            while not self.stopping:
                for key, _ in self.selector.select(CHECK_SECONDS):
                    kind, owner = key.data
                    if kind == "listener":
                        self._accept()
                    elif kind == "client":
                        self._from_client(owner)
                    elif kind == "child":
                        self._from_child(owner)
                self._dispatch()
                self._check_memory()
                if self.retired and not self.children:
                    print("retired, and no task left: exiting", flush=True)
                    break
                if self.clients or self.children or self.queue:
                    self.last_busy = time.monotonic()
                elif time.monotonic() - self.last_busy > self.idle:
                    print(f"idle for {self.idle:.0f}s: exiting", flush=True)
                    break
        finally:
            self.shutdown("the worker server was stopped")

    def shutdown(self, reason: str) -> None:
        self.stopping = True
        for child in list(self.children.values()):
            self._kill(child, reason)
        for child in list(self.children.values()):
            self._reap(child, block=True)
        for client in list(self.clients):
            self._drop(client)
        if self.listener is not None:
            with contextlib.suppress(OSError):
                if os.stat(self.sock_path).st_ino == self._inode:
                    os.unlink(self.sock_path)
            self.listener.close()
            self.listener = None
        import shutil

        shutil.rmtree(self.log_dir, ignore_errors=True)

    # -- clients --------------------------------------------------------------------------------

    def _accept(self) -> None:
        if self.listener is None:  # never: the selector reports it only while it listens
            return
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        sock.settimeout(30)  # a client that stops reading for this long is dropped
        client = _Client(sock)
        self.clients.append(client)
        self.selector.register(sock, selectors.EVENT_READ, ("client", client))

    def _fail(self, client: _Client, task_id: str, message: str) -> None:
        """Fail a task with a message of the server's own (a build failure at the program)."""
        failure = {"kind": "build", "message": message, "manifest": "", "location": ""}
        self._send(client, {"op": "failed", "task_id": task_id, "failure": failure})

    def _send(self, client: _Client, message: dict[str, Any]) -> None:
        if client not in self.clients:
            return
        try:
            protocol.send(client.sock, message)
        except OSError:
            self._drop(client)

    def _drop(self, client: _Client) -> None:
        """A client hung up (or is hung): kill its children, drop its queued tasks."""
        if client not in self.clients:
            return
        self.clients.remove(client)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(client.sock)
        client.sock.close()
        self.queue = deque(item for item in self.queue if item[0] is not client)
        for child in list(self.children.values()):
            if child.client is client:
                self._kill(child, "the build that asked for it went away")

    def _from_client(self, client: _Client) -> None:
        try:
            data = client.sock.recv(1 << 16)
            messages = client.reader.feed(data) if data else None
        except (OSError, protocol.ProtocolError):
            messages = None
        if messages is None:
            self._drop(client)
            return
        for message in messages:
            self._handle(client, message)

    def _handle(self, client: _Client, message: dict[str, Any]) -> None:
        op = message["op"]
        if op == "hello":
            client.pid = int(message.get("pid") or 0)
            client.greeted = message.get("protocol") == protocol.PROTOCOL
            self._send(client, {"op": "hello", "protocol": protocol.PROTOCOL,
                                "toolchain": self.sock_path.stem, "pid": os.getpid()})
        elif op == "status":
            self._send(client, self.status())
        elif op == "stop":
            self._send(client, {"op": "stopping"})
            self.stopping = True
        elif not client.greeted:
            self._drop(client)
        elif op == "submit":
            self.queue.append((client, message))
        elif op == "cancel":
            task_id = message.get("task_id")
            if not isinstance(task_id, str):
                return  # names no task: nothing to cancel
            queued = [item for item in self.queue if item[0] is client and item[1]["task"]["task_id"] == task_id]
            for item in queued:
                self.queue.remove(item)
                self._fail(client, task_id, "cancelled")
            for child in list(self.children.values()):
                if child.client is client and child.task_id == task_id:
                    self._kill(child, "cancelled")

    def status(self) -> dict[str, Any]:
        return {
            "op": "status",
            "pid": os.getpid(),
            "toolchain": self.sock_path.stem,
            "python": sys.executable,
            "started": self.started,
            "uptime": round(time.time() - self.started, 1),
            "idle_timeout": self.idle,
            "jobs": self.jobs,
            "max_rss": self.max_rss,
            "clients": sum(1 for c in self.clients if c.greeted),
            "running": [{"task_id": c.task_id, "pid": c.pid, "rss": rss_bytes(c.pid), "client": c.client.pid}
                        for c in self.children.values()],
            "queued": len(self.queue),
            "tasks_run": self.tasks_run,
            "rss": rss_bytes(os.getpid()),
        }

    # -- children -------------------------------------------------------------------------------

    def _dispatch(self) -> None:
        if self.queue and not self.retired:
            from ptebuild.worker.execute import stale_toolchain

            stale = stale_toolchain()
            if stale is not None:
                self._retire(stale)
        if self.retired:
            for client, submit in self.queue:
                self._send(client, {"op": "retry", "task_id": submit["task"]["task_id"], "reason": self.retired})
            self.queue.clear()
            return
        while self.queue and len(self.children) < self.jobs and not self.stopping:
            client, submit = self.queue.popleft()
            task = submit["task"]
            if client not in self.clients:
                continue
            if needs_fresh_interpreter(task):
                self._start(client, submit, fresh=True)
                continue
            unsafe = fork_is_safe()
            if unsafe:
                self._fail(client, task["task_id"], f"the warm worker server cannot fork safely ({unsafe}); "
                                                    "build with --no-daemon")
                continue
            self._start(client, submit, fresh=False)

    def _start(self, client: _Client, submit: dict[str, Any], fresh: bool) -> None:
        task = submit["task"]
        fd, log_path = tempfile.mkstemp(prefix="task-", suffix=".log", dir=self.log_dir)
        read_end, write_end = os.pipe()
        parent = os.getpid()
        process = None
        if fresh:
            try:
                process = spawn_fresh(submit, write_end, fd, self.log_dir)
            except OSError as exc:
                for end in (fd, read_end, write_end):
                    os.close(end)
                self._fail(client, task["task_id"], f"the warm worker server could not start a fresh interpreter: {exc}")
                return
            pid = process.pid
        else:
            pid = os.fork()
        if pid == 0:  # the forked child: never returns
            code = 1
            try:
                os.close(read_end)
                self._child_closes()
                die_with_parent(parent)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.close(fd)
                code = run_child(submit, write_end)
            except BaseException:  # its last words, into its log (fd 2), before the exit that skips Python's own printing
                import traceback

                traceback.print_exc()
                sys.stderr.flush()
            finally:
                os._exit(code)
        os.close(fd)
        os.close(write_end)
        os.set_blocking(read_end, False)
        child = _Child(pid=pid, pipe=read_end, client=client, task_id=task["task_id"], log_path=log_path,
                       process=process)
        self.children[pid] = child
        self.tasks_run += 1
        self.selector.register(read_end, selectors.EVENT_READ, ("child", child))
        self._send(client, {"op": "started", "task_id": child.task_id})

    def _retire(self, reason: str) -> None:
        """Take no more tasks: a library this server imported is no longer what is installed.

        The socket is removed and the lock let go at once, so that the next build starts a new
        server (which imports what is installed now) while this one finishes its running tasks.
        """
        print(f"{reason}: retiring; a new server will run the next tasks", flush=True)
        self.retired = reason
        if self.listener is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(self.listener)
            with contextlib.suppress(OSError):
                if os.stat(self.sock_path).st_ino == self._inode:
                    os.unlink(self.sock_path)
            self.listener.close()
            self.listener = None
        if self.lock is not None:
            os.close(self.lock)
            self.lock = None

    def _child_closes(self) -> None:
        """In a new child: let go of the server's sockets and signal handlers."""
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        with contextlib.suppress(OSError):
            self.selector.close()
        if self.lock is not None:
            os.close(self.lock)  # a child must not keep the server's lock after the server died
        if self.listener is not None:
            self.listener.close()
        for client in self.clients:
            client.sock.close()
        for child in self.children.values():
            with contextlib.suppress(OSError):
                os.close(child.pipe)

    def _from_child(self, child: _Child) -> None:
        try:
            data = os.read(child.pipe, 1 << 20)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            try:
                messages = child.reader.feed(data)
            except protocol.ProtocolError as exc:
                self._kill(child, f"the worker process sent garbage: {exc}")
                return
            for message in messages:
                if child.finished:
                    continue
                message["task_id"] = child.task_id
                if message["op"] in ("done", "failed"):
                    child.finished = True
                failure = message.get("failure") if message["op"] == "failed" else None
                if isinstance(failure, dict) and failure.get("kind") == "stale":
                    # The child found what the check before the fork missed: a new server runs it.
                    if not self.retired:
                        self._retire(str(failure.get("message", "")))
                    message = {"op": "retry", "task_id": child.task_id, "reason": self.retired}
                self._send(child.client, message)
            return
        self._reap(child, block=True)

    def _reap(self, child: _Child, block: bool) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(child.pipe)
        with contextlib.suppress(OSError):
            os.close(child.pipe)
        try:
            _, status = os.waitpid(child.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            status = 0
        if child.process is not None:
            child.process.returncode = os.waitstatus_to_exitcode(status) if status else 0  # reaped here
        self.children.pop(child.pid, None)
        if not child.finished:
            reason = child.killed_for or (describe_wait_status(status) + last_words(child.log_path))
            self._fail(child.client, child.task_id, reason)
        with contextlib.suppress(OSError):
            os.unlink(child.log_path)

    def _kill(self, child: _Child, reason: str) -> None:
        if not child.killed_for:
            child.killed_for = reason
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)

    def _check_memory(self) -> None:
        for child in list(self.children.values()):
            rss = rss_bytes(child.pid)
            if rss > self.max_rss and not child.killed_for:
                self._kill(child, f"the worker process used {format_size(rss)} of memory, over the limit of "
                                  f"{format_size(self.max_rss)} (PTEBUILD_DAEMON_MAX_RSS); it was killed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ptebuild.daemon.server")
    parser.add_argument("--socket", required=True, type=Path)
    parser.add_argument("--idle", type=float, default=float(os.environ.get("PTEBUILD_DAEMON_IDLE") or protocol.IDLE_SECONDS))
    parser.add_argument("--detach", action="store_true", help="fork into the background first")
    args = parser.parse_args(argv)
    sock_path: Path = args.socket
    sock_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if args.detach:
        pid = os.fork()
        if pid != 0:
            os.write(1, f"{pid}\n".encode())
            os._exit(0)
        redirect_output(protocol.sibling(sock_path, ".log"))
    lock = take_lock(protocol.sibling(sock_path, ".lock"), wait=10)
    if lock is None:
        print(f"{os.getpid()}: another server holds {sock_path}: exiting", flush=True)
        return 0
    pid_file = protocol.sibling(sock_path, ".pid")
    pid_file.write_text(f"{os.getpid()}\n")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(SystemExit(0)))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the build's Ctrl-C is not for us (own session anyway)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    started = time.monotonic()
    from ptebuild.worker.execute import prepare_worker

    prepare_worker()
    print(f"{os.getpid()}: toolchain imported in {time.monotonic() - started:.1f}s", flush=True)
    for line in warm_before_forking():
        print(f"{os.getpid()}: {line}", flush=True)
    unsafe = fork_is_safe()
    if unsafe is not None:  # the warm-up left a thread: no child may be forked over it
        print(f"{os.getpid()}: after the warm-up this process cannot fork safely ({unsafe}): every task runs in a "
              "fresh interpreter", flush=True)
        os.environ["PTEBUILD_DAEMON_FRESH"] = "1"
    print(f"{os.getpid()}: warm in {time.monotonic() - started:.1f}s", flush=True)
    jobs = int(os.environ.get("PTEBUILD_DAEMON_JOBS") or os.cpu_count() or 1)
    max_rss = parse_size(os.environ["PTEBUILD_DAEMON_MAX_RSS"]) if os.environ.get("PTEBUILD_DAEMON_MAX_RSS") else default_max_rss()
    server = Server(sock_path, idle=args.idle, jobs=jobs, max_rss=max_rss, lock=lock)
    try:
        server.serve()
    except SystemExit:
        pass  # SIGTERM: serve() has shut down on its way out
    finally:
        with contextlib.suppress(OSError):
            if pid_file.read_text().strip() == str(os.getpid()):
                pid_file.unlink()
        if server.lock is not None:  # a retired server gave it up already
            os.close(server.lock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
