"""Starting a warm worker server: in its own session, at most one per socket.

:func:`start_detached` (called by a build that found no server) runs ``python -m
ptebuild.daemon.server --socket PATH --detach``; the server forks into the background and takes
the socket's ``.lock`` (:func:`take_lock`) for its whole life, so that a second server started
for the same socket at the same moment exits at once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sys
import time
from pathlib import Path

from ptebuild.daemon import protocol
from ptebuild.processes import worker_environment


def start_detached(sock_path: Path, idle: float | None = None) -> int:
    """Start a server for ``sock_path`` in its own session; return its pid once it has detached."""
    import subprocess

    sock_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    log = protocol.sibling(sock_path, ".log")
    with contextlib.suppress(OSError):
        if log.stat().st_size > 1 << 20:
            log.unlink()
    command = [sys.executable, "-m", "ptebuild.daemon.server", "--socket", str(sock_path), "--detach"]
    if idle is not None:
        command += ["--idle", str(idle)]
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        cwd="/", start_new_session=True, close_fds=True, env=worker_environment(os.environ),
    )
    out, _ = process.communicate(timeout=30)  # the first process forks the server, says its pid, exits
    try:
        return int(out.decode().strip())
    except ValueError:
        raise OSError(f"the worker server did not start (exit code {process.returncode})") from None


def take_lock(path: Path, wait: float) -> int | None:
    """The server's lifelong flock, waiting up to ``wait`` seconds (a killed server's children may
    hold it for a moment); None if another server keeps it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK) or time.monotonic() > deadline:
                os.close(fd)
                if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    return None
                raise
        time.sleep(0.05)
