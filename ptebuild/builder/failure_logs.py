"""A failed program's whole output, kept beside the build (as cargo and ninja keep a failed step's).

The report gives one line per failure (:mod:`ptebuild.causes`); the rest (the traceback with its
chained causes, a C++ backtrace, what ExecuTorch's runtime logged) goes to
``<out>/.ptebuild/logs/<program>.log``, named at the end of that line. The file is written
atomically, replaced by the program's next failure and removed when the program is built or
restored. Nothing else lives in ``.ptebuild/logs``.
"""

from __future__ import annotations

from pathlib import Path

from ptebuild.atomic import write_atomically

LOGS = Path(".ptebuild", "logs")


def log_path(out_dir: Path, program: str) -> Path:
    return Path(out_dir) / LOGS / f"{program}.log"


def keep(out_dir: Path, program: str, line: str, detail: str) -> str:
    """Write the failure's log; return what the report's line gets at its end (``""`` if the
    log could not be written: the line alone is still right)."""
    path = log_path(out_dir, program)
    text = f"{line}\n\n{detail.rstrip()}\n" if detail.strip() else f"{line}\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, text.encode("utf-8", "replace"))
    except OSError:
        return ""
    return f" (full output: {path})"


def forget(out_dir: Path, program: str) -> None:
    """Remove the program's log, if any (it was built or restored)."""
    path = log_path(out_dir, program)
    try:
        path.unlink()
    except FileNotFoundError:
        return
    except OSError:
        return
    for folder in (path.parent, path.parent.parent):
        try:
            folder.rmdir()  # only when empty
        except OSError:
            break
