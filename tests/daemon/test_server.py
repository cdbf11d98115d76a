"""The warm worker server's loop (:mod:`ptebuild.daemon.server`), held to what its clients rely on:
a greeting before any task, a status that tells the truth, a child per task (started, its
messages passed on with the task's id, failed with the reason when it dies without a word), at
most ``jobs`` children and the rest queued, a cancel or a client that hangs up ending its tasks,
the memory limit, the idle exit and the stop request, each leaving no socket, log folder or child
behind.

Each test starts a real server process on a socket of its own: :class:`~ptebuild.daemon.server.
Server` served by a fresh interpreter that has not imported the toolchain (``python -m
ptebuild.daemon.server`` imports torch and executorch first, ten seconds: the builds of
``tests/executors/test_daemon.py`` run it). Its children are real: a forked one given a task it
cannot read dies at once; a fresh interpreter (``PTEBUILD_DAEMON_FRESH=1``) says so, then imports
the toolchain for seconds, long enough to be cancelled, killed or stopped.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tasks_for_tests import wait_for

from ptebuild.daemon import protocol

SERVE = """
import sys
from pathlib import Path
from ptebuild.daemon.server import Server
Server(Path(sys.argv[1]), idle=float(sys.argv[2]), jobs=int(sys.argv[3]), max_rss=int(sys.argv[4])).serve()
"""

FRESH_CHILD_SAYS = "in a fresh interpreter (no fork): importing the toolchain"


def alive(pid: int) -> bool:
    """True if ``pid`` runs (a zombie does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Served:
    """A server process of the test's and its socket."""

    def __init__(self, folder: Path, idle: float = 60.0, jobs: int = 4, max_rss: int = 8 << 30, fresh: bool = False):
        self.sock_path = folder / "workers" / f"{protocol.toolchain_id()}.sock"
        self.sock_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.log = folder / "server.log"
        env = {**os.environ, "PTEBUILD_DAEMON_FRESH": "1" if fresh else ""}
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", SERVE, str(self.sock_path), str(idle), str(jobs), str(max_rss)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            )
        wait_for(lambda: self.listening() or self.process.poll() is not None, 30, "the server to listen")
        assert self.process.poll() is None, self.log.read_text()

    def listening(self) -> bool:
        """True once a connection is accepted (the socket's file comes before it listens)."""
        try:
            protocol.connect(self.sock_path).close()
        except OSError:
            return False
        return True

    def client(self) -> Client:
        return Client(protocol.connect(self.sock_path))

    def status(self) -> dict:
        with self.client() as client:
            return client.request({"op": "status"})

    def log_dirs(self) -> list[Path]:
        return sorted(self.sock_path.parent.glob("children-*"))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)


class Client:
    """A connection to the server, reading its messages in order."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = protocol.Reader()
        self.pending: list[dict] = []

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.sock.close()

    def send(self, message: dict) -> None:
        protocol.send(self.sock, message)

    def next(self, timeout: float = 20.0) -> dict:
        """The next message; AssertionError if none comes in ``timeout`` seconds or the server hangs up."""
        deadline = time.monotonic() + timeout
        while not self.pending:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                raise AssertionError(f"no message from the server in {timeout}s") from None
            assert data, "the server hung up"
            self.pending += self.reader.feed(data)
        return self.pending.pop(0)

    def request(self, message: dict) -> dict:
        self.send(message)
        return self.next()

    def hello(self) -> dict:
        return self.request({"op": "hello", "protocol": protocol.PROTOCOL, "toolchain": protocol.toolchain_id(),
                             "pid": os.getpid()})

    def submit(self, task_id: str, cwd: Path) -> None:
        """A task the child cannot read (no plan): a forked child fails at once, a fresh one once
        it has imported the toolchain, seconds later."""
        self.send({"op": "submit", "task": {"task_id": task_id}, "cwd": str(cwd), "env": dict(os.environ)})

    def hung_up(self, timeout: float = 10.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1 << 16) == b""
        except ConnectionResetError:
            return True


@pytest.fixture
def serve(tmp_path) -> Iterator:
    """Start servers (``serve(**kwargs)``); each is killed at the end if it still runs."""
    started: list[Served] = []

    def start(**kwargs) -> Served:
        served = Served(tmp_path, **kwargs)
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()


# -- greeting and status ------------------------------------------------------------------------


def test_the_server_greets_with_its_toolchain_and_reports_its_state(serve):
    server = serve(idle=45.0, jobs=3, max_rss=123 << 20)
    with server.client() as greeted, server.client() as silent:
        assert protocol.hello(greeted.sock, timeout=5) == {
            "op": "hello", "protocol": protocol.PROTOCOL, "toolchain": protocol.toolchain_id(), "pid": server.process.pid}
        status = silent.request({"op": "status"})  # asked without a greeting: answered all the same
    assert status["pid"] == server.process.pid
    assert status["toolchain"] == protocol.toolchain_id()
    assert (status["idle_timeout"], status["jobs"], status["max_rss"]) == (45.0, 3, 123 << 20)
    assert status["clients"] == 1  # only the greeted one
    assert (status["running"], status["queued"], status["tasks_run"]) == ([], 0, 0)
    assert status["rss"] > 0 and 0 <= status["uptime"] < 60


@pytest.mark.parametrize("greeting", [None, {"op": "hello", "protocol": protocol.PROTOCOL - 1, "pid": 1}],
                         ids=["none", "another-protocol"])
def test_a_task_from_a_client_that_has_not_greeted_is_refused_by_hanging_up(serve, tmp_path, greeting):
    server = serve()
    with server.client() as client:
        if greeting is not None:
            assert client.request(greeting)["op"] == "hello"
        client.submit("task", tmp_path)
        assert client.hung_up()
    assert server.status()["tasks_run"] == 0


def test_a_client_that_sends_garbage_is_dropped_and_the_others_are_served(serve):
    server = serve()
    with server.client() as other:
        other.hello()
        with server.client() as garbage:
            garbage.sock.sendall(protocol.HEADER.pack(9) + b"not json!")
            assert garbage.hung_up()
        assert other.request({"op": "status"})["clients"] == 1


# -- children -----------------------------------------------------------------------------------


def test_a_child_that_dies_without_a_word_fails_its_task_with_why_and_its_last_words(serve, tmp_path):
    server = serve()
    with server.client() as client:
        client.hello()
        client.submit("broken", tmp_path)
        assert client.next() == {"op": "started", "task_id": "broken"}
        failed = client.next()
    assert failed["op"] == "failed" and failed["task_id"] == "broken"
    failure = failed["failure"]
    assert failure["kind"] == "build" and (failure["manifest"], failure["location"]) == ("", "")
    assert failure["message"].startswith("the worker process exited with code 1"), failure
    status = server.status()
    assert (status["running"], status["tasks_run"]) == ([], 1)
    assert not list(server.log_dirs()[0].iterdir()), "the child's log was left behind"


def test_a_forked_childs_python_error_is_its_last_words(serve, tmp_path):
    """Its os._exit skips Python's own printing: the child prints the exception into its log first
    (before, the log stayed empty and the task's message named no cause)."""
    server = serve()
    with server.client() as client:
        client.hello()
        client.submit("broken", tmp_path)
        assert client.next()["op"] == "started"
        failed = client.next()
    assert failed["failure"]["message"].startswith("the worker process exited with code 1; it last printed: KeyError: ")


def test_at_most_jobs_children_run_and_a_cancel_ends_a_queued_or_running_task(serve, tmp_path):
    server = serve(jobs=1, fresh=True)
    with server.client() as client:
        client.hello()
        client.submit("first", tmp_path)
        client.submit("second", tmp_path)
        assert client.next() == {"op": "started", "task_id": "first"}
        assert client.next() == {"op": "progress", "task_id": "first", "text": FRESH_CHILD_SAYS}
        status = server.status()
        assert [r["task_id"] for r in status["running"]] == ["first"] and status["queued"] == 1
        assert status["running"][0]["client"] == os.getpid()
        child = status["running"][0]["pid"]
        assert alive(child)

        client.send({"op": "cancel"})  # names no task: nothing happens
        client.send({"op": "cancel", "task_id": "second"})
        cancelled = {"kind": "build", "message": "cancelled", "manifest": "", "location": ""}
        assert client.next() == {"op": "failed", "task_id": "second", "failure": cancelled}
        client.send({"op": "cancel", "task_id": "first"})
        assert client.next() == {"op": "failed", "task_id": "first", "failure": cancelled}
        assert not alive(child)
        status = client.request({"op": "status"})
    assert (status["running"], status["queued"], status["tasks_run"]) == ([], 0, 1)


def test_a_client_that_hangs_up_has_its_children_killed_and_its_queue_dropped(serve, tmp_path):
    server = serve(jobs=1, fresh=True)
    with server.client() as other:
        other.hello()
        with server.client() as leaving:
            leaving.hello()
            leaving.submit("running", tmp_path)
            leaving.submit("queued", tmp_path)
            assert leaving.next()["op"] == "started"
            [running] = other.request({"op": "status"})["running"]
        wait_for(lambda: not alive(running["pid"]), 10, "the child of the client that hung up to be killed")
        status = other.request({"op": "status"})
        assert (status["running"], status["queued"], status["clients"], status["tasks_run"]) == ([], 0, 1, 1)
        assert other.pending == []  # nothing of the other client's tasks came here


def test_a_child_over_the_memory_limit_is_killed_and_its_task_failed_saying_so(serve, tmp_path):
    server = serve(max_rss=40 << 20, fresh=True)
    with server.client() as client:
        client.hello()
        client.submit("big", tmp_path)
        assert client.next()["op"] == "started"
        assert client.next()["op"] == "progress"
        failed = client.next()  # importing torch takes it past 40 MiB long before the task could fail
    assert failed["op"] == "failed" and failed["task_id"] == "big"
    message = failed["failure"]["message"]
    assert message.startswith("the worker process used ") and message.endswith(
        " of memory, over the limit of 40.0 MiB (PTEBUILD_DAEMON_MAX_RSS); it was killed"), message


# -- the end of a server ------------------------------------------------------------------------


def test_a_stop_request_kills_the_children_and_leaves_nothing_behind(serve, tmp_path):
    server = serve(fresh=True)
    with server.client() as client:
        client.hello()
        client.submit("running", tmp_path)
        assert client.next()["op"] == "started"
        [running] = server.status()["running"]
        assert len(server.log_dirs()) == 1
        assert client.request({"op": "stop"}) == {"op": "stopping"}
        assert client.next() == {"op": "failed", "task_id": "running", "failure": {
            "kind": "build", "message": "the worker server was stopped", "manifest": "", "location": ""}}
        assert client.hung_up()
    assert server.process.wait(timeout=10) == 0
    assert not alive(running["pid"])
    assert not server.sock_path.exists() and server.log_dirs() == []


def test_an_idle_server_exits_but_not_while_a_client_is_connected(serve):
    server = serve(idle=1.0)
    with server.client() as client:
        client.hello()
        time.sleep(1.6)
        assert server.process.poll() is None, "it left while a client was connected"
    assert server.process.wait(timeout=10) == 0
    assert "idle for 1s: exiting" in server.log.read_text()
    assert not server.sock_path.exists() and server.log_dirs() == []


def test_a_socket_another_server_took_over_is_left_to_it(serve):
    server = serve()
    with server.client() as client:
        server.sock_path.unlink()
        server.sock_path.write_text("the next server's socket")
        assert client.request({"op": "stop"}) == {"op": "stopping"}
    assert server.process.wait(timeout=10) == 0
    assert server.sock_path.read_text() == "the next server's socket"


def test_a_new_server_removes_the_log_folders_of_dead_servers_only(tmp_path, serve):
    workers = tmp_path / "workers"
    workers.mkdir(mode=0o700)
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    (workers / f"children-{dead.pid}-abc").mkdir()
    (workers / f"children-{dead.pid}-abc" / "task-1.log").write_text("a killed server's child")
    (workers / f"children-{os.getpid()}-def").mkdir()  # a live process's
    server = serve()
    assert [p.name.split("-")[1] for p in server.log_dirs()] == sorted([str(os.getpid()), str(server.process.pid)])
