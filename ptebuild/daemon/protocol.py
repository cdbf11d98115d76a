"""The warm worker server's wire format, its toolchain id and where its socket lives.

Place
    One server per toolchain and cache folder: ``<cache>/workers/<toolchain-id>.sock``, or
    ``$PTEBUILD_WORKERS_DIR/<toolchain-id>.sock`` for every cache folder (a Unix
    socket; the folder is mode 0700, so only its owner can connect), beside ``<id>.log`` (the
    server's stdout and stderr), ``<id>.pid`` and ``<id>.lock`` (an ``flock`` the server holds for
    its whole life: a second server for the same socket exits at once). The toolchain id
    (:func:`toolchain_id`) digests the Python executable and version, ``PYTHONPATH``, the torch,
    executorch and ptebuild versions (from their ``.dist-info`` folder names, no import),
    ptebuild's own source files and the installed plug-in backends (version and code): any
    ``pip install`` of another toolchain or plug-in, or an edit of ptebuild or a plug-in, names
    another socket, so a stale server is never reused; it idles out.

Framing
    Every message is one JSON object (UTF-8), preceded by its length as a 4-byte big-endian
    unsigned integer (:data:`HEADER`); at most :data:`MAX_MESSAGE` bytes. The same framing is used
    on the client's socket and on the pipe from each task's child process to the server.

Client -> server
    ``{"op": "hello", "protocol": 1, "toolchain": ID, "pid": PID}`` first, then any of
    ``{"op": "submit", "task": Task.to_json(), "cwd": FOLDER, "env": {...}}`` (the child runs in the
    build's folder and environment), ``{"op": "cancel", "task_id": ...}``,
    ``{"op": "status"}``, ``{"op": "stop"}``.

Server -> client
    ``{"op": "hello", "protocol": 1, "toolchain": ID, "pid": PID}`` (a different protocol or
    toolchain: the client hangs up), then per task ``{"op": "started", "task_id"}`` (a child
    process runs it), ``{"op": "progress", "task_id", "text", "stage"}`` (the stage: a
    ``ptebuild.insight.stages.Stage`` value, or empty), ``{"op": "stored", "task_id", "outputs":
    [OutputFile.to_json(), ...]}`` (its outputs are in the task's store, before its check), and one of
    ``{"op": "done", "task_id", "result": TaskResult.to_json()}`` (the outputs by digest: their
    bytes are in the task's store) or
    ``{"op": "failed", "task_id", "failure": TaskFailure.to_json()}`` (its kind, message, manifest
    and location), or ``{"op": "retry", "task_id", "reason"}``: the server retired (a library it
    imported changed on disk) and a new server must run the task;
    ``{"op": "status", ...}`` answers a status request (:meth:`Server.status`), ``{"op":
    "stopping"}`` a stop request.

Child -> server (a pipe)
    ``progress``, ``stored``, ``done`` and ``failed`` as above, without ``task_id``. A child that dies
    without a final message (a crash, a kill for memory) fails its task with the reason.

A client that hangs up (a finished build, Ctrl-C, ``kill -9``) has its running tasks' children
killed and its queued tasks dropped. A server that dies closes every socket: clients retry the
task once on a new server, then fail it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ptebuild import backend_registry, own_code

PROTOCOL = 2
HEADER = struct.Struct(">I")
MAX_MESSAGE = 64 << 20
"""Far above any message: a task and its result carry digests, never a file's bytes."""

IDLE_SECONDS = 300.0
"""A server with no client and no task for this long exits (``PTEBUILD_DAEMON_IDLE``)."""


class ProtocolError(OSError):
    """A peer sent something that is not a message of this protocol."""


def encode(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()
    if len(body) > MAX_MESSAGE:
        raise ProtocolError(f"message of {len(body)} bytes is over the limit of {MAX_MESSAGE}")
    return HEADER.pack(len(body)) + body


class Reader:
    """Cuts a byte stream into messages: feed it what ``recv`` returned."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self._buffer += data
        messages = []
        while len(self._buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self._buffer)
            if size > MAX_MESSAGE:
                raise ProtocolError(f"a message of {size} bytes announced, over the limit of {MAX_MESSAGE}")
            if len(self._buffer) < HEADER.size + size:
                break
            body = bytes(self._buffer[HEADER.size:HEADER.size + size])
            del self._buffer[:HEADER.size + size]
            try:
                message = json.loads(body)
            except ValueError as exc:
                raise ProtocolError(f"a message is not JSON: {exc}") from None
            if not isinstance(message, dict) or not isinstance(message.get("op"), str):
                raise ProtocolError("a message is not an object with an 'op'")
            messages.append(message)
        return messages


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(encode(message))


def request(sock: socket.socket, message: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Send ``message`` and wait up to ``timeout`` seconds for the next message back."""
    sock.settimeout(timeout)
    send(sock, message)
    reader = Reader()
    while True:
        data = sock.recv(1 << 16)
        if not data:
            raise ProtocolError("the worker server hung up")
        messages = reader.feed(data)
        if messages:
            return messages[0]


# -- place --------------------------------------------------------------------------------------


WORKERS_DIR_ENV = "PTEBUILD_WORKERS_DIR"


def workers_dir(cache_dir: Path) -> Path:
    """Where the warm servers of builds with this cache folder live: ``<cache>/workers``, or
    ``$PTEBUILD_WORKERS_DIR`` for every cache folder (one warm server per toolchain for builds
    with many caches, as a test suite or a monorepo's per-project caches)."""
    shared = os.environ.get(WORKERS_DIR_ENV)
    return Path(shared) if shared else Path(cache_dir) / "workers"


_toolchain: str | None = None


def toolchain_id() -> str:
    """A short digest of everything that makes a warm server's imports valid for this process."""
    global _toolchain
    if _toolchain is None:
        from ptebuild.distributions import installed_versions

        versions = installed_versions()
        parts = [
            f"python={os.path.realpath(sys.executable)}",
            f"version={sys.version}",
            f"pythonpath={os.environ.get('PYTHONPATH', '')}",
            *(f"{name}={versions.get(name, '-')}" for name in ("torch", "executorch", "ptebuild")),
            f"source={own_code.digest(own_code.files())}",
            f"plugins={backend_registry.fingerprint()}",  # a server must not run a plug-in's old code
        ]
        _toolchain = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]
    return _toolchain


def socket_path(cache_dir: Path, toolchain: str | None = None) -> Path:
    return workers_dir(cache_dir) / f"{toolchain or toolchain_id()}.sock"


def sibling(sock_path: Path, suffix: str) -> Path:
    """The server's ``.log``, ``.pid`` or ``.lock`` file beside its socket."""
    return sock_path.with_suffix(suffix)


@contextlib.contextmanager
def _address(path: Path) -> Iterator[str]:
    """An address for ``bind``/``connect``: a Unix socket path holds at most 107 bytes, so a
    long one is reached through the folder's descriptor in ``/proc/self/fd``."""
    if len(os.fsencode(str(path))) < 100 or not os.path.isdir("/proc/self/fd"):
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def connect(path: Path, timeout: float = 5.0) -> socket.socket:
    """A socket connected to the server at ``path``; OSError if none listens there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        with _address(path) as address:
            sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return sock


def listen(path: Path) -> socket.socket:
    """A listening socket at ``path`` (a stale socket file there is replaced)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with _address(path) as address:
        sock.bind(address)
    os.chmod(path, 0o600)
    sock.listen(64)
    return sock


def hello(sock: socket.socket, timeout: float) -> dict[str, Any]:
    """Greet the server at the other end; ProtocolError if it speaks another protocol or toolchain."""
    answer = request(sock, {"op": "hello", "protocol": PROTOCOL, "toolchain": toolchain_id(), "pid": os.getpid()}, timeout)
    if answer.get("op") != "hello" or answer.get("protocol") != PROTOCOL or answer.get("toolchain") != toolchain_id():
        raise ProtocolError(f"the worker server answered {answer!r}, not a hello of this toolchain")
    return answer
