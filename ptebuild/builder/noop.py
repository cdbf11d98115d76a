"""The no-op stamp: a build that had nothing to do, replayed from the stat of all it looked at.

A no-op build still reads the cached plan, computes every key, checks every discovered
dependency and every output through the stat cache: tens of milliseconds of imports and
queries. When such a build found everything up to date, it writes a stamp:

- ``<cache>/noop/<identity>.json``, ``identity`` a digest of the command line, the working
  folder, the interpreter, ``sys.path`` and the environment variables that steer a build;
- for every file the build digested or read (the manifest, the model's sources and weights, the
  discovered source dependencies, ptebuild's own code, each output and the build record), its
  ``stat`` (size, mtime, inode, ctime) and a digest of its bytes: the SHA-256 the build itself
  digested it to where it did (nothing is read again), else an xxh3 of the bytes; for every
  folder whose listing matters (each ``sys.path`` entry: installed distributions; the folders of
  those files, every folder of a model's package and every folder a ``sources`` pattern looks
  into: a new module; the output folder), its ``stat`` and an xxh3 of its listing (names and
  kinds); for each cache entry it hit, its size, inode and an xxh3 of its bytes;
- what the build printed.

The next build with the same identity stats those paths and, if nothing moved, prints the same
thing and exits: no store, no plan, no keys. A path whose stat moved is checked by content: the
file digested again, the folder listed again (a ``git checkout`` or an editor's save that
rewrote a file with the same bytes, a touched manifest). If every one holds the same content,
the build is still a no-op: it replays, and the stamp is written again with the new stats, so
the next replay is stat-only again. Any content that differs (an edit, ``pip install``, a
deleted output, a gc'd cache entry) means the full build runs, and decides. The stat alone is
never trusted for what changed too recently: as git's index does with racily clean files, a
file or folder changed less than :data:`RACY_NS` before the stamp's facts were taken (a second
edit in the same timestamp tick would keep size and mtime) is checked by content on every replay
until the stamp is written again after it aged. And a stamp is only written from facts that
held before the build began: a file that changed less than :data:`RACY_NS` before it, or while
it ran, may not hold the bytes the build read, and no stamp is written then.

The stamp is only written for a plain local build (no ``--reproduce``, ``--locked``, no CUDA
program, whose toolchain facts come from a GPU query rather than files).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

TYPE_CHECKING = False  # typing is not imported at run time: a no-op build answers through this module
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

FORMAT = "ptebuild-noop 2"
RACY_NS = 500_000_000
"""A stat taken less than this long after its file's last change is not trusted alone (file
times are coarse: a second edit in the same tick would keep size and mtime)."""
_ENV_PREFIXES = ("PTEBUILD_", "PYTHON", "TORCH", "CUDA", "XDG_CACHE_HOME", "HOME", "CI", "RAY_")
_XXH3, _SHA256 = "xxh3:", "sha256:"
"""The prefixes of a digest in the stamp: what it was made with."""


def identity(argv: list[str]) -> str:
    """A digest of what makes two invocations the same build."""
    import xxhash

    from ptebuild._version import __version__

    env = {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)}
    material = json.dumps(
        [FORMAT, __version__, argv, os.getcwd(), sys.executable, sys.path, sorted(env.items())],
        separators=(",", ":"),
    )
    return xxhash.xxh3_128_hexdigest(material.encode())


def stamp_path(cache_root: Path, argv: list[str]) -> Path:
    return Path(cache_root, "noop", f"{identity(argv)}.json")


class LookedAt:
    """What a build looked at, for its stamp: absolute (or relative to the working folder) paths."""

    __slots__ = ("digests", "entries", "files", "folders")

    def __init__(self, files: Iterable[str], folders: Iterable[str], entries: Iterable[str],
                 digests: Mapping[str, str] | None = None) -> None:
        self.files = sorted(set(files))
        """Files whose bytes the build used."""
        self.folders = sorted(set(folders))
        """Folders whose listing matters (a new module, a new distribution, a new output)."""
        self.entries = sorted(set(entries))
        """Cache entries it hit: replaced whole (a new inode) when they change, and touched on every
        hit (their mtime is their last use), so their size and inode stand for them."""
        self.digests = dict(digests or {})
        """The SHA-256 the build digested a file to (through the stat cache), by path: the stamp
        keeps it rather than reading the file again."""


# -- what a path is, now ----------------------------------------------------------------------


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _file_facts(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]


def _folder_facts(st: os.stat_result) -> list[int]:
    return [st.st_mtime_ns, st.st_ino, st.st_ctime_ns]


def _entry_facts(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_ino]


def _bytes_digest(path: str, like: str = _XXH3) -> str | None:
    """The digest of a file's bytes, made as ``like`` (a stamp's digest) was; None if unreadable.

    The stamp's own loop: :mod:`ptebuild.hashing` (SHA-256 only) imports more than a replay may."""
    if like.startswith(_SHA256):
        import hashlib

        hasher: Any = hashlib.sha256()
        prefix = _SHA256
    else:
        import xxhash

        hasher, prefix = xxhash.xxh3_128(), _XXH3
    buffer = bytearray(1 << 20)
    view = memoryview(buffer)
    try:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buffer):
                hasher.update(view[:n])
    except OSError:
        return None
    return prefix + str(hasher.hexdigest())


def _listing_digest(path: str, like: str = _XXH3) -> str | None:
    """An xxh3 of a folder's entries (name and kind, sorted); None if it cannot be listed."""
    import xxhash

    try:
        with os.scandir(path) as found:
            names = sorted(f"{e.name}/{'d' if e.is_dir() else 'f'}{'l' if e.is_symlink() else ''}" for e in found)
    except OSError:
        return None
    return _XXH3 + xxhash.xxh3_128_hexdigest("\0".join(names).encode("utf-8", "surrogateescape"))


_KINDS: dict[str, tuple[Callable[[os.stat_result], list[int]], Callable[[str, str], str | None], int | None]] = {
    # kind -> (its facts, its content's digest, the index of its ctime in the facts: trusted by
    # stat only once it is older than the stamp by RACY_NS; None: never racy)
    "files": (_file_facts, _bytes_digest, 3),
    "folders": (_folder_facts, _listing_digest, 2),
    "entries": (_entry_facts, _bytes_digest, None),
}


# -- writing and replaying --------------------------------------------------------------------


def write(path: Path, looked_at: LookedAt, replay: dict[str, Any], since: int) -> bool:
    """Write the stamp of a build that began at ``since`` (``time.time_ns()``); False (and
    nothing written) if something it looked at changed after, or less than :data:`RACY_NS`
    before, that moment: its bytes may not be those the build read."""
    digests = {os.path.abspath(name): digest for name, digest in looked_at.digests.items()}
    tables: dict[str, dict[str, list[Any] | None]] = {}
    for kind, paths in (("files", looked_at.files), ("folders", looked_at.folders), ("entries", looked_at.entries)):
        facts_of, digest_of, racy_at = _KINDS[kind]
        table: dict[str, list[Any] | None] = {}
        for name in sorted({os.path.abspath(p) for p in paths}):
            st = _stat(name)
            if st is None:
                table[name] = None  # missing: it must still be missing
                continue
            facts = facts_of(st)
            if racy_at is not None and facts[racy_at] >= since - RACY_NS:
                return False  # changed just before or during the build: the stamp cannot vouch for it
            known = digests.get(name) if kind == "files" else None
            if known is not None:
                digest: str | None = _SHA256 + known
            else:
                digest = digest_of(name, _XXH3)
                after = _stat(name)
                if after is None or facts_of(after) != facts:
                    return False  # changed while it was read
            table[name] = [*facts, digest]
        tables[kind] = table
    return _store(path, {"format": FORMAT, "written": since, **tables, "replay": replay})


def replay(path: Path) -> dict[str, Any] | None:
    """The stored output if everything the stamp lists holds the same content, else None.

    Stat first; what moved (or changed too recently to be trusted by its stat) is checked by
    content, and if all of it holds, the stamp is written again with the new stats."""
    started = time.time_ns()
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        return None
    checked = False
    try:
        trusted_before = int(document["written"]) - RACY_NS
        tables: dict[str, dict[str, list[Any] | None]] = {}
        for kind, (facts_of, digest_of, racy_at) in _KINDS.items():
            table: dict[str, list[Any] | None] = {}
            for name, expected in document[kind].items():
                st = _stat(name)
                if expected is None or st is None:
                    if expected is not None or st is not None:
                        return None  # appeared or vanished
                    table[name] = None
                    continue
                facts, digest = facts_of(st), expected[-1]
                if facts != expected[:-1] or (racy_at is not None and facts[racy_at] >= trusted_before):
                    if not isinstance(digest, str) or digest_of(name, digest) != digest:
                        return None  # moved, and its content differs (or cannot be told)
                    checked = True
                table[name] = [*facts, digest]
            tables[kind] = table
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return None
    if checked:  # the same content under new stats: next time, the stats alone answer
        _store(path, {**document, "written": started, **tables})
    kept: dict[str, Any] | None = document.get("replay")
    return kept


def _store(path: Path, document: dict[str, Any]) -> bool:
    """Write a stamp through a temporary file and a rename: a reader sees the old one or the new
    one; False if it cannot be written.

    Not :func:`ptebuild.atomic.write_atomically`: a replay that writes the stamp again must not
    import what that costs (typing, tempfile), nor wait for an fsync. A stamp lost or torn by a
    crash is no stamp (its JSON does not parse): the next build takes the full path.
    """
    data = json.dumps(document, separators=(",", ":")).encode()
    temporary = path.with_name(f".{path.name}.{os.getpid()}-{time.monotonic_ns()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError:
        forget(temporary)
        return False
    return True


def forget(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
