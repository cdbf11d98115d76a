"""What a ``.pte`` or ``.ptd`` holds, part by part: for ``ptebuild inspect`` and :mod:`.diff`.

Pure Python, like the readers it builds on (:mod:`.pte_file`, :mod:`.ptd_file`); imports
neither torch nor executorch. :func:`inspect` tells the two kinds apart by their file
identifier (bytes 4..8: ``ET12`` for a ``.pte``, ``FT01`` for a ``.ptd``) and hands the file
to :func:`inspect_pte` (:mod:`.pte_inspection`, which says what a program is described as; and
its figures, :mod:`.pte_insight`) or :func:`inspect_ptd` (:mod:`.ptd_inspection`). The values they return are in
:mod:`.inspection` (with their JSON); :func:`describe` (:mod:`.inspection_text`) writes them
as text.
"""

from __future__ import annotations

import os
from pathlib import Path

from ptebuild.errors import FormatError
from ptebuild.runtime.inspection import (
    DataKey,
    DelegateInfo,
    MethodInfo,
    PtdInspection,
    PteInspection,
    SegmentInfo,
    ValueSpec,
)
from ptebuild.runtime.inspection_text import describe
from ptebuild.runtime.ptd_file import FILE_IDENTIFIER as PTD_ID
from ptebuild.runtime.ptd_inspection import inspect_ptd
from ptebuild.runtime.pte_file import FILE_IDENTIFIER as PTE_ID
from ptebuild.runtime.pte_inspection import inspect_pte

__all__ = [
    "DataKey",
    "DelegateInfo",
    "MethodInfo",
    "PtdInspection",
    "PteInspection",
    "SegmentInfo",
    "ValueSpec",
    "describe",
    "inspect",
    "inspect_ptd",
    "inspect_pte",
]


def inspect(path: str | os.PathLike[str]) -> PteInspection | PtdInspection:
    """Describe a ``.pte`` or ``.ptd`` (told apart by the identifier at bytes 4..8).

    Raises:
        FormatError: neither, or truncated/corrupt; the message names the file and offset.
        OSError: the file cannot be opened.
    """
    path = Path(path)
    with open(path, "rb") as f:
        identifier = f.read(8)[4:8]
    if identifier == PTE_ID:
        from dataclasses import replace

        from ptebuild.runtime.pte_insight import read_file_insight

        found = inspect_pte(path)
        return replace(found, insight=read_file_insight(path))
    if identifier == PTD_ID:
        return inspect_ptd(path)
    raise FormatError(
        f"{path}: neither a .pte nor a .ptd: identifier {identifier!r} at offset 4 "
        f"(expected {PTE_ID!r} or {PTD_ID!r})"
    )
