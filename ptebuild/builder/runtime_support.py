"""The runtimes that load a program's outputs, for its build record, read once per content.

:func:`ptebuild.runtime.compat.support_of_outputs` walks a program's flatbuffers (every value of
every execution plan): tens of milliseconds per program, which a no-op build would pay for every
program it finds up to date. What it returns depends on nothing but the files' names and bytes,
the executorch version that wrote them and ptebuild's code that reads them, so it is kept in the
local cache (a memo of the cache front end) under a key over exactly those: the outputs'
SHA-256s (checked in place by the caller: the files in the folder are these bytes), the writer,
and a digest of ``ptebuild/runtime/`` (an edit to the readers reads the files again).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ptebuild import own_code
from ptebuild.results import OutputFile

SCHEMA = "ptebuild-runtime-support 1"

DigestFile = Callable[[Path], tuple[str, int]]


class Memo(Protocol):
    """Where small documents only this machine needs are kept (:class:`ptebuild.store.frontend.Cache`)."""

    def memo_get(self, key: str) -> dict[str, Any] | None: ...

    def memo_put(self, key: str, document: dict[str, Any]) -> None: ...


class RuntimeSupportReader:
    """``RuntimeSupport.to_json()`` of programs in one output folder, memoised in ``memo``."""

    def __init__(self, folder: Path, memo: Memo | None, digest_file: DigestFile) -> None:
        self.folder = folder
        self.memo = memo
        self.digest_file = digest_file
        self._code: str | None = None

    def code(self) -> str:
        """The digest of the code that reads the files (the import closure of its module), once."""
        if self._code is None:
            self._code = own_code.closure_digest(["ptebuild.runtime.compat"], self.digest_file, self.memo)
        return self._code

    def key(self, outputs: tuple[OutputFile, ...], writer: str | None) -> str:
        import json

        import xxhash

        material = [SCHEMA, self.code(), writer, sorted((o.name, o.sha256, o.size) for o in outputs)]
        return xxhash.xxh3_128_hexdigest(json.dumps(material, separators=(",", ":")).encode())

    def of(self, outputs: tuple[OutputFile, ...], writer: str | None) -> dict[str, Any] | None:
        """What the record says of these outputs (in place, with these digests) under ``runtime``;
        None when they have no ``.pte`` or cannot be read as what their names say."""
        key = self.key(outputs, writer) if self.memo is not None else ""
        if self.memo is not None:
            kept = self.memo.memo_get(key)
            if kept is not None and isinstance(kept.get("runtime"), dict):
                runtime: dict[str, Any] = kept["runtime"]
                return runtime
        from ptebuild.runtime.compat import support_of_outputs

        support = support_of_outputs(self.folder, [o.name for o in outputs], writer)
        if support is None:
            return None  # not kept: verification reports the problem, and a fixed file is read again
        found = support.to_json()
        if self.memo is not None:
            self.memo.memo_put(key, {"runtime": found})
        return found
