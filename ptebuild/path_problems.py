"""What is wrong with a path a manifest names, in words, before the operating system says it worse.

Every file a manifest names (a model's weights, a shim list, a ``sources`` match) must be a
readable regular file; the output folder must be a folder that can be made; a glob of files
(a model's ``sources``, a bundle's ``include``) must be a relative pattern inside the manifest's
folder (:func:`glob_problem`). The operating system refuses some of these with errors that would
surface as ``internal error: OSError: File name too long`` (or ``ValueError: embedded null byte``
for a TOML ``"\\u0000"``); :func:`file_problem` and :func:`folder_problem` name the problem first, and the caller
turns it into the usual one located line (exit 2).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

NAME_MAX = 255
"""Bytes in one file name (Linux, macOS; Windows counts 255 UTF-16 units)."""
PATH_MAX = 4096


def _unnameable(path: Path) -> str | None:
    """A path no file system can hold: a NUL character (the operating system's calls raise
    ValueError on it), a name too long."""
    if "\x00" in str(path):
        return "it holds a NUL character, which no file name may"
    return _too_long(path)


def _too_long(path: Path) -> str | None:
    for part in path.parts:
        size = len(os.fsencode(part))
        if size > NAME_MAX:
            return f"a name in it is longer than a file name may be ({size} bytes, at most {NAME_MAX})"
    size = len(os.fsencode(str(path)))
    if size > PATH_MAX:
        return f"the path is longer than a path may be ({size} bytes, at most {PATH_MAX})"
    return None


def _os_problem(exc: OSError) -> str:
    if exc.errno == errno.ENAMETOOLONG:
        return "the name is longer than this file system allows"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "it cannot be read (permission denied)"
    if exc.errno == errno.ELOOP:
        return "it is a link that points back at itself"
    if exc.errno == errno.ENOTDIR:
        return "a folder on its path is a file"
    return exc.strerror or str(exc)


def file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be read as an input file, or None if it can."""
    unnameable = _unnameable(path)
    if unnameable:
        return unnameable
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "it is a link to a missing file" if os.path.islink(path) else "no such file"
    except OSError as exc:
        return _os_problem(exc)
    if stat.S_ISDIR(st.st_mode):
        return "it is a folder, not a file"
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file (a device, a pipe or a socket)"
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        return _os_problem(exc)
    return None


def folder_problem(path: Path) -> str | None:
    """Why ``path`` cannot be (made into) an output folder, or None if it can."""
    unnameable = _unnameable(path)
    if unnameable:
        return unnameable
    probe = path
    while True:
        try:
            st = os.stat(probe)
        except FileNotFoundError:
            if probe.parent == probe:
                return None
            probe = probe.parent
            continue
        except OSError as exc:
            return _os_problem(exc)
        if not stat.S_ISDIR(st.st_mode):
            return "it is a file, not a folder" if probe == path else f"{str(probe)!r} on its path is a file, not a folder"
        return None


def describe(name: str, problem: str) -> str:
    """``no such file 'w.pt'``, or ``'w.pt': it is a folder, not a file`` (a long name shortened)."""
    shown = name if len(name) <= 80 else name[:40] + "..." + name[-24:]
    return f"no such file {shown!r}" if problem == "no such file" else f"{shown!r}: {problem}"


def glob_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not a glob of files inside the manifest's folder, or None if it is: the
    phrase that follows the pattern in the error (``'' is empty``). Path.glob refuses some of these
    with ValueError, NotImplementedError, IndexError, AttributeError or OSError instead of matching nothing."""
    if not pattern.strip():
        return "is empty"
    if "\x00" in pattern:
        return "holds a NUL character"
    path = Path(pattern)
    if path.is_absolute() or pattern.startswith(("/", "\\")) or path.drive:
        return "leaves the manifest's folder (an absolute path)"
    if ".." in path.parts:
        return "leaves the manifest's folder ('..')"
    if not path.parts:
        return "names the manifest's folder itself, not files in it"
    return _too_long(path)
