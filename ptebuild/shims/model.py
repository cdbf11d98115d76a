"""The shim list: which names a DLL exports and how, independent of any file format.

An :class:`Export` is one line of a ``.def`` file's EXPORTS section; a :class:`ShimList` is the
DLL name plus its exports in source order (duplicates allowed until :meth:`ShimList.canonical`).
Names are checked here, once, so every reader and writer can rely on them.
"""

from __future__ import annotations

import dataclasses
import re
from enum import IntEnum
from typing import Literal, get_args

from ptebuild.errors import UsageError

ExportType = Literal["code", "data", "const"]
EXPORT_TYPES: tuple[str, ...] = get_args(ExportType)

MAX_ORDINAL = 0xFFFF


class ImportType(IntEnum):
    """The low two bits of a short import's TypeInfo (PE/COFF spec, "Import Type")."""

    CODE = 0
    DATA = 1
    CONST = 2


class ImportNameType(IntEnum):
    """Bits 2-4 of a short import's TypeInfo (PE/COFF spec, "Import Name Type")."""

    ORDINAL = 0
    NAME = 1
    NAME_NOPREFIX = 2
    NAME_UNDECORATE = 3
    NAME_EXPORTAS = 4


IMPORT_TYPE_OF: dict[ExportType, ImportType] = {
    "code": ImportType.CODE,
    "data": ImportType.DATA,
    "const": ImportType.CONST,
}
EXPORT_TYPE_OF: dict[ImportType, ExportType] = {v: k for k, v in IMPORT_TYPE_OF.items()}


# White space, control characters, DEL and U+FFFD (left by undecodable bytes).
_BAD_NAME_CHARACTER = re.compile(r"[\s\x00-\x1f\x7f\ufffd]")


def symbol_name_problem(name: str) -> str | None:
    """Why a linker cannot take ``name`` as a symbol, or None if it can.

    Control characters, white space and NUL cannot survive a ``.def`` file, a COFF string
    table (NUL-terminated) or a linker command line, so they are refused everywhere.
    """
    if not name:
        return "an empty name"
    bad = _BAD_NAME_CHARACTER.search(name)
    if bad:
        return f"name {name!r} contains the character {bad.group()!r}"
    if name.startswith("@"):
        return f"name {name!r} starts with '@', which a .def file reads as an ordinal"
    return None


def dll_name_problem(dll: str) -> str | None:
    """Why ``dll`` cannot be the DLL name of an import library, or None if it can."""
    if not dll:
        return "an empty DLL name"
    for ch in dll:
        if ord(ch) < 0x20 or ord(ch) == 0x7F or ch in '/\\"' or ch == "\ufffd":
            return f"DLL name {dll!r} contains the character {ch!r}"
    return None


@dataclasses.dataclass(frozen=True, order=True)
class Export:
    """One exported name.

    ``ordinal`` is the ``@N`` of a ``.def`` file (None when absent or ``@0``): with ``noname`` the
    DLL exports by ordinal only, otherwise it is only the hint the loader tries first.
    ``private`` exports are part of the DLL but left out of the import library.
    """

    name: str
    type: ExportType = "code"
    ordinal: int | None = None
    noname: bool = False
    private: bool = False

    def __post_init__(self) -> None:
        problem = symbol_name_problem(self.name)
        if problem:
            raise UsageError(f"{problem}, which a linker cannot import; rename it")
        if self.type not in EXPORT_TYPES:
            raise UsageError(f"export {self.name!r}: unknown type {self.type!r}; use one of {', '.join(EXPORT_TYPES)}")
        if self.ordinal is not None and not 1 <= self.ordinal <= MAX_ORDINAL:
            raise UsageError(f"export {self.name!r}: ordinal {self.ordinal} is outside 1..{MAX_ORDINAL}; give one inside")
        if self.noname and self.ordinal is None:
            raise UsageError(f"export {self.name!r}: NONAME needs an ordinal; add @N")

    def describe(self) -> str:
        """The attributes as a .def file spells them, for messages (e.g. ``DATA @5``)."""
        parts = {"code": [], "data": ["DATA"], "const": ["CONSTANT"]}[self.type]
        if self.ordinal is not None:
            parts = [f"@{self.ordinal}"] + (["NONAME"] if self.noname else []) + parts
        if self.private:
            parts.append("PRIVATE")
        return " ".join(parts) or "code"


@dataclasses.dataclass(frozen=True)
class ShimList:
    """A DLL name and its exports, in source order (llvm-dlltool's order)."""

    dll: str
    exports: tuple[Export, ...] = ()

    def __post_init__(self) -> None:
        problem = dll_name_problem(self.dll)
        if problem:
            raise UsageError(f"{problem}; name the DLL like aoti_cuda_shims.dll")
        object.__setattr__(self, "exports", tuple(self.exports))

    def names(self) -> set[str]:
        return {e.name for e in self.exports}

    def canonical(self) -> ShimList:
        """Sorted by name (as UTF-8 bytes) and de-duplicated: the same set gives the same list.

        Raises :class:`UsageError` when one name is declared twice with different attributes.
        """
        by_name: dict[str, Export] = {}
        for export in self.exports:
            seen = by_name.setdefault(export.name, export)
            if seen != export:
                raise UsageError(conflict_message(seen, export))
        ordered = sorted(by_name.values(), key=lambda e: e.name.encode("utf-8"))
        return ShimList(self.dll, tuple(ordered))


def conflict_message(first: Export, second: Export) -> str:
    return (
        f"export {first.name!r} is declared twice, as {first.describe()} and as {second.describe()}; "
        "keep one declaration"
    )
