"""Check a shim list against what was built: the import library and the shared library.

- Import library: the non-PRIVATE exports it imports must be exactly the declared ones (same names,
  same type); see :func:`compare_with_library`.
- Shared library: every declared export, PRIVATE included, must be defined. ELF (``.so``): the
  dynamic symbol table (``.dynsym``, found through the section table), defined symbols only
  (``st_shndx != SHN_UNDEF``), GLOBAL, WEAK or GNU_UNIQUE binding; read with pyelftools. PE
  (``.dll``): the names of the export directory, read by :mod:`ptebuild.shims.pe`.
"""

from __future__ import annotations

import dataclasses
import io
import struct

from ptebuild.errors import FormatError
from ptebuild.shims.model import ShimList

ELF_MAGIC = b"\x7fELF"
DOS_MAGIC = b"MZ"
DEFINED_BINDINGS = {"STB_GLOBAL", "STB_WEAK", "STB_GNU_UNIQUE", "STB_LOOS"}


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """Differences found; ``ok`` when there are none. Each list is sorted."""

    missing: tuple[str, ...] = ()  # declared, not found
    extra: tuple[str, ...] = ()  # found, not declared
    wrong_type: tuple[str, ...] = ()  # "name: declared data, found code"

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.wrong_type)


def compare_with_library(declared: ShimList, library: ShimList) -> CheckReport:
    """Does ``library`` import exactly the declared non-PRIVATE exports, each with its type?"""
    wanted = {e.name: e for e in declared.exports if not e.private}
    found = {e.name: e for e in library.exports}
    wrong = [
        f"{name}: declared {wanted[name].type}, found {found[name].type}"
        for name in sorted(wanted.keys() & found.keys())
        if wanted[name].type != found[name].type
    ]
    if declared.dll.lower() != library.dll.lower():
        wrong.insert(0, f"DLL: declared {declared.dll}, found {library.dll}")
    return CheckReport(tuple(sorted(wanted.keys() - found.keys())), tuple(sorted(found.keys() - wanted.keys())), tuple(wrong))


def compare_with_shared_library(declared: ShimList, defined: set[str]) -> CheckReport:
    """Are all declared exports (PRIVATE included) among the shared library's defined symbols?"""
    return CheckReport(missing=tuple(sorted(declared.names() - defined)))


def defined_symbols(data: bytes, source: str) -> set[str]:
    """Names a shared library defines for others: ELF dynamic symbols or PE exports."""
    if data.startswith(ELF_MAGIC):
        return elf_defined_symbols(data, source)
    if data.startswith(DOS_MAGIC):
        return pe_exported_names(data, source)
    raise FormatError(f"{source}: offset 0: neither ELF nor PE; pass a built .so or .dll")


def elf_defined_symbols(data: bytes, source: str) -> set[str]:
    """Defined, non-local symbols of the ELF dynamic symbol table. Raises :class:`FormatError`."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    try:
        elf = ELFFile(io.BytesIO(data))
        tables = [s for s in elf.iter_sections() if s["sh_type"] == "SHT_DYNSYM" and isinstance(s, SymbolTableSection)]
        if not tables:
            raise FormatError(f"{source}: no dynamic symbol table (.dynsym); pass a shared library, not an object or a static executable")
        names = set()
        for table in tables:
            for symbol in table.iter_symbols():
                if symbol["st_shndx"] != "SHN_UNDEF" and symbol["st_info"]["bind"] in DEFINED_BINDINGS and symbol.name:
                    names.add(symbol.name)
        return names
    except FormatError:
        raise
    except (ELFError, struct.error, ValueError, KeyError, IndexError, UnicodeDecodeError, AssertionError) as exc:
        raise FormatError(f"{source}: malformed ELF file: {exc}; rebuild it") from None
    except Exception as exc:  # pyelftools raises assorted errors on hostile input
        raise FormatError(f"{source}: malformed ELF file ({type(exc).__name__}: {exc}); rebuild it") from None


def pe_exported_names(data: bytes, source: str) -> set[str]:
    """Names in a PE image's export directory (:mod:`ptebuild.shims.pe`). Raises :class:`FormatError`."""
    from ptebuild.shims.pe import PeImage

    return set(PeImage(data, source).exports())
