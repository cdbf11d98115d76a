"""A program's figures for its build record and report, joined from the worker's and the files'.

The worker's half (delegation, mutable buffers, inputs' and outputs' bytes) comes with the action
result (:attr:`~ptebuild.results.ActionResult.insight`), so a restored program has it without
lowering again. The files' half (the size split, the planned buffers) is read from the ``.pte``
as published (:mod:`ptebuild.insight.sizes`, :mod:`ptebuild.insight.memory`), and the ``.ptd``
files from the outputs as published (a shared weights file: the merged one, and who else loads
it). Reading a ``.pte`` depends on nothing but its bytes and ptebuild's code that reads it, so
what it gives is kept in the local cache's memo under a key over exactly those (the way
:mod:`.runtime_support` keeps a program's runtimes): a no-op build reads no flatbuffer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from ptebuild import own_code
from ptebuild.builder.runtime_support import Memo
from ptebuild.errors import FormatError
from ptebuild.insight.program import ProgramInsight
from ptebuild.insight.sizes import SizeSplit, WeightsFile
from ptebuild.results import OutputFile

SCHEMA = "ptebuild-file-figures 1"
READERS = ("ptebuild.builder.insight", "ptebuild.runtime.pte_insight")
"""The modules that read a ``.pte``'s figures: their import closure is the memo's code input."""

DigestFile = Callable[[Path], tuple[str, int]]


class InsightReader:
    """Programs' figures in one output folder, the files' half memoised in ``memo``."""

    def __init__(self, folder: Path, memo: Memo | None, digest_file: DigestFile) -> None:
        self.folder = folder
        self.memo = memo
        self.digest_file = digest_file
        self._code: str | None = None

    def code(self) -> str:
        if self._code is None:
            self._code = own_code.closure_digest(READERS, self.digest_file, self.memo)
        return self._code

    def _key(self, pte: OutputFile) -> str:
        import json

        import xxhash

        material = [SCHEMA, self.code(), pte.sha256, pte.size]
        return xxhash.xxh3_128_hexdigest(json.dumps(material, separators=(",", ":")).encode())

    def file_part(self, pte: OutputFile) -> tuple[SizeSplit, dict[str, tuple[int, ...]]] | None:
        """The ``.pte``'s size split (without ``.ptd`` files) and planned buffers; None if it
        cannot be read (verification reports why)."""
        key = self._key(pte) if self.memo is not None else ""
        if self.memo is not None:
            kept = self.memo.memo_get(key)
            if kept is not None:
                try:
                    return SizeSplit.from_json(kept["size"]), {str(m): tuple(int(n) for n in b) for m, b in kept["planned"].items()}
                except (KeyError, TypeError, ValueError, AttributeError):
                    pass
        from ptebuild.runtime.pte_insight import planned_buffers, pte_split

        try:
            split = pte_split(self.folder / pte.name)
            planned = planned_buffers(self.folder / pte.name)
        except (FormatError, OSError):
            return None
        if self.memo is not None:
            self.memo.memo_put(key, {"size": split.to_json(), "planned": {m: list(b) for m, b in planned.items()}})
        return split, planned

    def of(self, worker: ProgramInsight | None, outputs: tuple[OutputFile, ...],
                sharing: Mapping[str, tuple[str, ...]] | None = None) -> ProgramInsight:
        """The program's whole figures: the worker's half (``ActionResult.insight``; None: none)
        with the files' half of ``outputs`` as published. ``sharing``: a ``.ptd`` name -> the
        other programs that load it."""
        base = worker or ProgramInsight()
        pte = next((o for o in outputs if o.name.endswith(".pte")), None)
        found = self.file_part(pte) if pte is not None else None
        if found is None:
            return base
        split, planned = found
        weights = [WeightsFile(o.name, o.size, tuple((sharing or {}).get(o.name, ()))) for o in outputs if o.name.endswith(".ptd")]
        return base.with_files(split.with_weights(weights), planned)
