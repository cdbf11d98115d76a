"""Small facts about processes, shared by the executors, the warm server and the output folder."""

from __future__ import annotations

import os
from collections.abc import Mapping

TYPE_CHECKING = False  # typing and signal are not imported at run time: a no-op build imports this module
if TYPE_CHECKING:
    from typing import NoReturn

WORKER_HASH_SEED = "0"
"""The ``PYTHONHASHSEED`` of every interpreter that lowers programs, unless the environment sets
one (``build --reproduce`` sets a random one on purpose): the order of a set of strings inside a
compiler must not change a program's bytes from one build to the next."""


def env_flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """True if the environment variable ``name`` is ``1``, ``true``, ``yes`` or ``on`` (any case)."""
    return (os.environ if environ is None else environ).get(name, "").lower() in ("1", "true", "yes", "on")


def worker_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """``environment`` for a new lowering interpreter: with :data:`WORKER_HASH_SEED` if it has none."""
    return {"PYTHONHASHSEED": WORKER_HASH_SEED, **environment}


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def pid_alive(pid: int) -> bool:
    """True if a process ``pid`` exists (one of another user counts)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def describe_exit(code: int | None) -> str:
    """Why a worker ended, from its exit code (negative: the signal that killed it, as
    :mod:`multiprocessing` reports it; None: it vanished)."""
    if code is None:
        return "the worker vanished"
    if code < 0:
        import signal

        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"the worker process crashed: killed by {name}{hint}"
    return f"the worker process exited with code {code}"


def describe_wait_status(status: int) -> str:
    """:func:`describe_exit` for a status from ``os.waitpid``."""
    return describe_exit(-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


def last_line(log_path: str | os.PathLike[str]) -> str:
    """The last non-blank line of a log (at most 300 characters), or "" if none or unreadable."""
    try:
        with open(log_path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 4096))
            lines = [line.strip() for line in log.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def last_words(log_path: str | os.PathLike[str]) -> str:
    """The last line a crashed worker printed, as a hint (native crashes print before dying)."""
    line = last_line(log_path)
    return f"; it last printed: {line}" if line else ""


def die_with_parent(parent: int | None = None) -> None:
    """Ask Linux to kill this process when its parent dies (``PR_SET_PDEATHSIG``), and exit at
    once if the parent (``parent``, else the one that started us) is already gone.

    Without it, a ``kill -9`` of ptebuild or of the warm server would leave workers lowering
    for nobody.
    """
    import sys

    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))
        except (OSError, AttributeError):
            pass
    if (os.getppid() != parent) if parent is not None else (os.getppid() == 1):
        os._exit(1)


def redirect_output(log_path: str | os.PathLike[str]) -> None:
    """Send this process's stdout and stderr (fd 1 and 2) to ``log_path`` (appending).

    Native code in torch, XNNPACK and cpuinfo prints probe chatter there; what a crashed worker
    last printed is read back from the log (:func:`last_words`).
    """
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def exit_without_teardown(code: int = 0) -> NoReturn:
    """End this worker process now: its ``atexit`` handlers run (temporary folders' finalizers,
    Inductor's compile pools) and its output is flushed, but the interpreter's teardown is skipped.

    Freeing every module and object of a worker that imported torch and executorch and lowered a
    program takes about a second, and the build that stops it waits for its exit; nothing freed
    there is the build's (the OS takes the memory back at once).
    """
    import atexit
    import sys

    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        os._exit(code)
