"""The no-op stamp: a build that had nothing to do, replayed from the stat of all it looked at.

A no-op build still reads the cached plan, computes every key, checks every discovered
dependency and every output through the stat cache: tens of milliseconds of imports and
queries. When such a build found everything up to date, it writes a stamp:

- ``<cache>/noop/<identity>.json``, ``identity`` a digest of the command line, the working
  folder, the interpreter, ``sys.path`` and the environment variables that steer a build;
- the ``stat`` (size, mtime, inode, ctime) of every file the build digested or read: the
  manifest, the model's sources and weights, the discovered source dependencies, ptebuild's own
  code, each output and the build record, the cache entries it hit; and of every folder whose
  listing matters (each ``sys.path`` entry: installed distributions; the folders of those files:
  a new module; the output folder);
- what the build printed.

The next build with the same identity stats those paths (no file is read) and, if nothing
moved, prints the same thing and exits: no store, no plan, no keys. Anything that moved (an
edit, ``pip install``, a deleted output, a gc'd cache entry) means the full build runs, and
decides. As git's index does with racily clean files, a file modified within :data:`RACY_NS` of
the stamp is not trusted: the stamp is not written then.

The stamp is only written for a plain local build (no ``--check``, ``--locked``, no CUDA
program, whose toolchain facts come from a GPU query rather than files).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path

TYPE_CHECKING = False  # typing is not imported at run time: a no-op build answers through this module
if TYPE_CHECKING:
    from typing import Any

FORMAT = "ptebuild-noop 1"
RACY_NS = 500_000_000
"""A file changed less than this long before the stamp is not trusted (file times are coarse:
a second edit in the same tick would keep size and mtime)."""
_ENV_PREFIXES = ("PTEBUILD_", "PYTHON", "TORCH", "CUDA", "XDG_CACHE_HOME", "HOME", "CI", "RAY_")


def identity(argv: list[str]) -> str:
    """A digest of what makes two invocations the same build."""
    import xxhash

    from ptebuild import __version__

    env = {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)}
    material = json.dumps(
        [FORMAT, __version__, argv, os.getcwd(), sys.executable, sys.path, sorted(env.items())],
        separators=(",", ":"),
    )
    return xxhash.xxh3_128_hexdigest(material.encode())


def stamp_path(cache_root: Path, argv: list[str]) -> Path:
    return Path(cache_root, "noop", f"{identity(argv)}.json")


def _file_stat(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]


def _dir_stat(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_ino]


def _entry_stat(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_ino]


_STATS = {"files": _file_stat, "folders": _dir_stat, "entries": _entry_stat}


def write(path: Path, files: Iterable[str], folders: Iterable[str], entries: Iterable[str], replay: dict[str, Any]) -> bool:
    """Write the stamp; False (and nothing written) if a file or folder changed just now.

    ``entries``: cache entries, replaced whole (a new inode) when they change and touched on every
    hit (their mtime is their last use): their size and inode stand for them.
    """
    from ptebuild.atomic import write_atomically

    now = time.time_ns()
    stats: dict[str, dict[str, list[int] | None]] = {kind: {} for kind in _STATS}
    for kind, paths in (("files", files), ("folders", folders), ("entries", entries)):
        for name in sorted({os.path.abspath(p) for p in paths}):
            st = _STATS[kind](name)
            if st is not None and kind != "entries" and now - st[1 if kind == "files" else 0] < RACY_NS:
                return False  # modified just now: the same mtime could hide a second edit
            stats[kind][name] = st
    document = {"format": FORMAT, "written": now, **stats, "replay": replay}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps(document, separators=(",", ":")).encode())
    except OSError:
        return False
    return True


def replay(path: Path) -> dict[str, Any] | None:
    """The stored output if nothing the stamp lists moved, else None."""
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        return None
    try:
        for kind, stat in _STATS.items():
            for name, expected in document[kind].items():
                if stat(name) != expected:
                    return None
    except (AttributeError, KeyError, TypeError):
        return None
    return document.get("replay")


def forget(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
