"""ptebuild's own source files, and digests of them: what keys and identities say about ptebuild.

Several things depend on ptebuild's code: an action key (the code a worker runs to lower and
check a program), a shim library's key (the import-library writer), a shared weights file's key
(the merger), the capability probe's facts, and the warm server's identity (all of it: a server
must never run other code than the build that talks to it). A key names the *entry modules* of
what it covers; the files are their import closure (:mod:`ptebuild.import_closure`), computed
from the source, so a module that one of them comes to import is covered without anyone listing
it. This module finds those files and digests them one way.

The closure is parsed once per version of ptebuild's code: :func:`closure_files` keeps it in the
local cache (a memo of the cache front end) under a key over the digest of all ptebuild's files,
with the file -> SHA-256 breakdown of each digest it made, so that ``--explain`` can name the
files an edit changed (:func:`changed_files`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parent
"""The ``ptebuild`` package folder."""

DigestFile = Callable[[Path], tuple[str, int]]

CLOSURE_SCHEMA = "ptebuild-code-closure 1"
_BREAKDOWN = "ptebuild-code-files 1"


class Memo(Protocol):
    """Where small documents are kept between builds (:class:`ptebuild.store.frontend.Cache`)."""

    def memo_get(self, key: str) -> dict[str, Any] | None: ...

    def memo_put(self, key: str, document: dict[str, Any]) -> None: ...


Graph = dict[str, tuple[str, list[str]]]
"""module -> (its file, relative to the package folder; the modules it imports)."""
_graphs: dict[tuple[str, str], Graph] = {}
"""(root, digest of all its files) -> its import graph: this process's memo."""
_seen: dict[str, tuple[Stats, str]] = {}
"""root -> (the stats of all its files, the digest of all its files) when last digested here."""
_closure_digests: dict[tuple[str, tuple[str, ...]], tuple[Stats, str]] = {}
"""(root, entries) -> (the stats of all the root's files, the closure's digest) when last digested here."""
RACY_NS = 2_000_000_000
"""Stats younger than this are not trusted for the process's memos (a second edit in the same
timestamp tick keeps size and mtime): the files are digested again."""


def files(*parts: str) -> list[Path]:
    """The ``.py`` files of ptebuild under ``parts`` (files or folders, relative to the package;
    none: all of them), sorted; ``__pycache__`` left out."""
    found: set[Path] = set()
    for part in parts or ("",):
        path = ROOT / part
        if path.is_dir():
            found.update(p for p in path.rglob("*.py") if "__pycache__" not in p.parts)
        elif path.is_file():
            found.add(path)
    return sorted(found)


def digest(paths: Iterable[Path], digest_file: DigestFile | None = None, root: Path = ROOT) -> str:
    """One digest (xxh3-128) over the files' names (relative to ``root``, default the package) and SHA-256s.

    ``digest_file``: how a file's SHA-256 is had (the store's stat cache); default: hashed here.
    """
    import xxhash

    if digest_file is None:
        from ptebuild.hashing import hash_file

        digest_file = hash_file
    lines = []
    for path in paths:
        try:
            sha = digest_file(path)[0]
        except OSError:
            sha = "unreadable"
        lines.append(f"{Path(os.path.relpath(path, root)).as_posix()}:{sha}")
    return xxhash.xxh3_128_hexdigest("\n".join(lines).encode())


def _memo_key(*parts: str) -> str:
    import xxhash

    return xxhash.xxh3_128_hexdigest("\0".join(parts).encode())


def import_graph(digest_file: DigestFile | None = None, memo: Memo | None = None, root: Path = ROOT) -> Graph:
    """The import graph of the package folder ``root``: module -> the modules it imports
    (:func:`ptebuild.import_closure.import_graph`), parsed once per version of its code (kept in
    this process and in ``memo``, under the digest of all its files)."""
    everything = everything_digest(root, digest_file)
    local = (str(root), everything)
    graph = _graphs.get(local)
    key = _memo_key(CLOSURE_SCHEMA, everything)
    if graph is None and memo is not None:
        document = memo.memo_get(key)
        if document is not None and isinstance(document.get("graph"), dict):
            try:
                graph = {str(k): (str(v[0]), [str(m) for m in v[1]]) for k, v in document["graph"].items()}
            except (TypeError, IndexError):
                graph = None  # damaged: parsed again
    if graph is None:
        from ptebuild import import_closure

        modules = import_closure.module_files(root, root.name)
        graph = {name: (modules[name].relative_to(root).as_posix(), sorted(imported))
                 for name, imported in import_closure.import_graph(modules).items()}
        if memo is not None:
            memo.memo_put(key, {"graph": graph})
    _graphs[local] = graph
    return graph


Stats = tuple[tuple[str, int, int, int, int], ...]


def _stats(root: Path) -> Stats | None:
    """``(path, size, mtime, inode, ctime)`` of every ``.py`` file under ``root``, sorted (a file
    added or removed changes them too); None when one changed too recently to be trusted
    (:data:`RACY_NS`). One ``scandir`` walk: a few milliseconds for ptebuild's 240 files."""
    now = time.time_ns()
    found = []
    pending = [str(root)]
    while pending:
        try:
            with os.scandir(pending.pop()) as listing:
                for entry in listing:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name != "__pycache__":
                            pending.append(entry.path)
                    elif entry.name.endswith(".py"):
                        st = entry.stat()
                        if now - st.st_mtime_ns < RACY_NS or now - st.st_ctime_ns < RACY_NS:
                            return None
                        found.append((entry.path, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns))
        except OSError:
            return None
    return tuple(sorted(found))


def everything_digest(root: Path = ROOT, digest_file: DigestFile | None = None) -> str:
    """:func:`digest` of all the ``.py`` files under ``root``: ptebuild's whole code (the plan
    cache's key, the import graph's memo); once per process while their stats hold."""
    stats = _stats(root)
    seen = _seen.get(str(root))
    if stats is not None and seen is not None and seen[0] == stats:
        return seen[1]
    value = digest(files_under(root), digest_file, root)
    if stats is not None:
        _seen[str(root)] = (stats, value)
    return value


def closure_files(
    entries: Iterable[str], digest_file: DigestFile | None = None, memo: Memo | None = None, root: Path = ROOT
) -> list[Path]:
    """The files of the import closure of the modules ``entries`` (dotted names) in the package
    folder ``root``, sorted (:func:`import_graph`). KeyError for an entry that is no module of it."""
    graph = import_graph(digest_file, memo, root)
    return sorted(root / graph[name][0] for name in _closure(entries, graph))


def _closure(entries: Iterable[str], graph: Graph) -> set[str]:
    reached: set[str] = set()
    pending: list[str] = []
    for entry in entries:
        if entry not in graph:
            raise KeyError(entry)
        parts = entry.split(".")
        pending.extend(".".join(parts[:depth]) for depth in range(1, len(parts) + 1))
    while pending:
        module = pending.pop()
        if module in reached or module not in graph:
            continue
        reached.add(module)
        pending.extend(graph[module][1])
    return reached


def files_under(root: Path) -> list[Path]:
    """Every ``.py`` file under ``root``, sorted (:func:`files` for another package folder)."""
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def closure_digest(
    entries: Iterable[str], digest_file: DigestFile | None = None, memo: Memo | None = None, root: Path = ROOT,
    *, explained: bool = False,
) -> str:
    """:func:`digest` of the import closure of ``entries``; ``explained``: its breakdown (file ->
    SHA-256) is kept in ``memo`` too, for :func:`changed_files` (an action key's, for ``--explain``)."""
    if digest_file is None:
        from ptebuild.hashing import hash_file

        digest_file = hash_file
    wanted = tuple(sorted(entries))
    stats = _stats(root)
    known = _closure_digests.get((str(root), wanted))
    if stats is not None and known is not None and known[0] == stats:
        if not explained or memo is None or memo.memo_get(_memo_key(_BREAKDOWN, known[1])) is not None:
            return known[1]
    paths = closure_files(wanted, digest_file, memo, root)
    value = digest(paths, digest_file, root)
    if stats is not None:
        _closure_digests[(str(root), wanted)] = (stats, value)
    if memo is not None and explained:
        key = _memo_key(_BREAKDOWN, value)
        if memo.memo_get(key) is None:
            breakdown = {Path(os.path.relpath(p, root)).as_posix(): _sha(p, digest_file) for p in paths}
            memo.memo_put(key, {"files": breakdown})
    return value


def _sha(path: Path, digest_file: DigestFile) -> str:
    try:
        return digest_file(path)[0]
    except OSError:
        return "unreadable"


def changed_files(before: str, after: str, memo: Memo | None) -> list[str] | None:
    """The files (relative to the package) whose change made the digest ``before`` into ``after``
    (:func:`closure_digest`), added and removed ones too; None if either breakdown is not known here."""
    if memo is None:
        return None
    documents = [memo.memo_get(_memo_key(_BREAKDOWN, value)) for value in (before, after)]
    if any(d is None or not isinstance(d.get("files"), dict) for d in documents):
        return None
    old, new = (dict(d["files"]) for d in documents if d is not None)
    return sorted(name for name in set(old) | set(new) if old.get(name) != new.get(name))
