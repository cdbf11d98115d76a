"""Check a shim list against what was built: the import library and the shared library.

- Import library: the non-PRIVATE exports it imports must be exactly the declared ones (same names,
  same type); see :func:`compare_with_library`.
- Shared library: every declared export, PRIVATE included, must be defined. ELF (``.so``): the
  dynamic symbol table (``.dynsym``, found through the section table), defined symbols only
  (``st_shndx != SHN_UNDEF``), GLOBAL, WEAK or GNU_UNIQUE binding; read with pyelftools. PE
  (``.dll``): the names of the export directory (data directory 0); the layout is in the PE/COFF
  spec, "The .edata Section": u32 flags, time, u16 major, minor, u32 name RVA, ordinal base,
  address count, name count, address table RVA, name pointer RVA, ordinal table RVA.
"""

from __future__ import annotations

import dataclasses
import io
import struct

from ptebuild.errors import FormatError
from ptebuild.shims.model import ShimList

ELF_MAGIC = b"\x7fELF"
DOS_MAGIC = b"MZ"
PE_SIGNATURE = b"PE\0\0"
DOS_LFANEW_OFFSET = 0x3C
PE_FILE_HEADER = struct.Struct("<HHIIIHH")
PE_OPTIONAL_MAGIC = struct.Struct("<H")
PE32_MAGIC, PE32_PLUS_MAGIC = 0x10B, 0x20B
# Offset of NumberOfRvaAndSizes in the optional header; the data directories follow it.
PE_RVA_COUNT_OFFSET = {PE32_MAGIC: 92, PE32_PLUS_MAGIC: 108}
PE_DATA_DIRECTORY = struct.Struct("<II")
PE_SECTION_HEADER = struct.Struct("<8sIIIIIIHHI")
PE_EXPORT_DIRECTORY = struct.Struct("<IIHHIIIIIII")
U32_LE = struct.Struct("<I")
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
    """Names in a PE image's export directory. Raises :class:`FormatError`."""
    where = "DOS header"
    try:
        (pe_at,) = U32_LE.unpack_from(data, DOS_LFANEW_OFFSET)
        where = "PE signature"
        if data[pe_at : pe_at + 4] != PE_SIGNATURE:
            raise FormatError(f"{source}: offset {pe_at}: no PE signature; pass a Windows DLL")
        where = "COFF file header"
        header_at = pe_at + 4
        _machine, section_count, _t, _p, _n, optional_size, _flags = PE_FILE_HEADER.unpack_from(data, header_at)
        optional_at = header_at + PE_FILE_HEADER.size
        where = "optional header"
        (magic,) = PE_OPTIONAL_MAGIC.unpack_from(data, optional_at)
        if magic not in PE_RVA_COUNT_OFFSET:
            raise FormatError(f"{source}: offset {optional_at}: unknown optional header magic 0x{magic:x}")
        (directory_count,) = U32_LE.unpack_from(data, optional_at + PE_RVA_COUNT_OFFSET[magic])
        sections_at = optional_at + optional_size
        where = "section table"
        sections = [PE_SECTION_HEADER.unpack_from(data, sections_at + i * PE_SECTION_HEADER.size) for i in range(section_count)]
        if directory_count < 1:
            return set()
        export_rva, export_size = PE_DATA_DIRECTORY.unpack_from(data, optional_at + PE_RVA_COUNT_OFFSET[magic] + 4)
        if export_rva == 0 or export_size == 0:
            return set()

        def file_offset(rva: int) -> int:
            for _name, virtual_size, address, raw_size, raw_at, *_rest in sections:
                if address <= rva < address + max(virtual_size, raw_size):
                    offset = raw_at + rva - address
                    if offset >= len(data):
                        break
                    return offset
            raise FormatError(f"{source}: RVA 0x{rva:x} lies in no section of the file; the DLL is damaged")

        where = "export directory"
        directory = PE_EXPORT_DIRECTORY.unpack_from(data, file_offset(export_rva))
        name_count, names_rva = directory[7], directory[9]
        where = "export name table"
        pointers_at = file_offset(names_rva) if name_count else 0
        names = set()
        for index in range(name_count):
            (name_rva,) = U32_LE.unpack_from(data, pointers_at + 4 * index)
            start = file_offset(name_rva)
            end = data.find(b"\0", start)
            if end < 0:
                raise FormatError(f"{source}: offset {start}: export name is not NUL-terminated; the DLL is damaged")
            names.add(data[start:end].decode("utf-8"))
        return names
    except struct.error:
        raise FormatError(f"{source}: {where} truncated; the DLL is damaged") from None
    except UnicodeDecodeError:
        raise FormatError(f"{source}: an export name is not UTF-8; the DLL is damaged") from None
