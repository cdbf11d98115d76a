"""ptebuild's own source files, and digests of them: what keys and identities say about ptebuild.

Four things depend on ptebuild's code: an action key (the modules whose code decides a program's
bytes), a shim library's key (the import-library writer), a shared weights file's key (the
merger), and the warm server's identity (all of it: a server must never run other code than the
build that talks to it). Each names the files it covers; this module lists them and digests them
one way.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent
"""The ``ptebuild`` package folder."""

DigestFile = Callable[[Path], tuple[str, int]]


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
