"""Read what a PE image (a Windows DLL) exports and imports, in pure Python.

The layout, from the PE/COFF specification (all integers little-endian):

- DOS header: a u32 at 0x3C gives the offset of the signature ``PE\\0\\0``.
- COFF file header, right after it (20 bytes): u16 machine (0x8664 for x86-64), u16 section
  count, u32 time, u32 symbol table offset, u32 symbol count, u16 optional header size, u16
  characteristics (0x2000: a DLL).
- Optional header: u16 magic, 0x10B (PE32) or 0x20B (PE32+); ``NumberOfRvaAndSizes`` at offset
  92 (PE32) or 108 (PE32+), then that many data directories of u32 RVA and u32 size: 0 is the
  export table, 1 the import table.
- Section table, after the optional header, 40 bytes each: 8-byte name, u32 virtual size, u32
  virtual address, u32 raw size, u32 raw offset, u32 relocations, u32 line numbers, u16, u16,
  u32 characteristics (0x20000000: executable). An RVA maps to a file offset through the section
  that holds it.
- Export directory (``.edata``, 40 bytes): u32 flags, u32 time, u16 major, u16 minor, u32 name
  RVA, u32 ordinal base, u32 address count, u32 name count, u32 address table RVA, u32 name
  pointer RVA, u32 ordinal table RVA. The i-th name pointer's name goes with the i-th u16 of the
  ordinal table, an index into the address table. An address inside the export directory is a
  forwarder (``OTHER.name``); one in an executable section is code, anything else data.
- Import directory (``.idata``): 20-byte descriptors up to an all-zero one: u32 lookup table
  RVA, u32 time, u32 forwarder chain, u32 DLL name RVA, u32 address table RVA. Lookup entries
  are u64 (PE32+) or u32 (PE32) up to a zero one; with the top bit set an entry imports by
  ordinal (low 16 bits), else it is the RVA of a u16 hint and a NUL-terminated name.

Every malformed or truncated structure raises :class:`FormatError` naming the file and the part.
"""

from __future__ import annotations

import dataclasses
import struct

from ptebuild.errors import FormatError
from ptebuild.shims.model import ExportType

DOS_MAGIC = b"MZ"
PE_SIGNATURE = b"PE\0\0"
DOS_LFANEW_OFFSET = 0x3C
FILE_HEADER = struct.Struct("<HHIIIHH")
OPTIONAL_MAGIC = struct.Struct("<H")
PE32_MAGIC, PE32_PLUS_MAGIC = 0x10B, 0x20B
RVA_COUNT_OFFSET = {PE32_MAGIC: 92, PE32_PLUS_MAGIC: 108}
DATA_DIRECTORY = struct.Struct("<II")
SECTION_HEADER = struct.Struct("<8sIIIIIIHHI")
EXPORT_DIRECTORY = struct.Struct("<IIHHIIIIIII")
IMPORT_DESCRIPTOR = struct.Struct("<IIIII")
U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")
EXPORT_TABLE, IMPORT_TABLE = 0, 1
MACHINE_AMD64 = 0x8664
CHARACTERISTIC_DLL = 0x2000
SECTION_EXECUTABLE = 0x20000000
MAX_IMPORTED_DLLS = 4096
MAX_IMPORTS_PER_DLL = 1 << 20


@dataclasses.dataclass(frozen=True)
class Section:
    name: str
    address: int
    virtual_size: int
    raw_offset: int
    raw_size: int
    characteristics: int


class PeImage:
    """One PE image's headers; :meth:`exports` and :meth:`imports` read its tables."""

    def __init__(self, data: bytes, source: str):
        self.data = data
        self.source = source
        where = "DOS header"
        try:
            if data[:2] != DOS_MAGIC:
                raise FormatError(f"{source}: no DOS header ('MZ'), so not a Windows DLL: give a .dll")
            (pe_at,) = U32.unpack_from(data, DOS_LFANEW_OFFSET)
            if data[pe_at : pe_at + 4] != PE_SIGNATURE:
                raise FormatError(f"{source}: offset {pe_at}: no PE signature, so not a Windows DLL: give a .dll")
            where = "COFF file header"
            header_at = pe_at + 4
            self.machine, section_count, _t, _p, _n, optional_size, self.characteristics = (
                FILE_HEADER.unpack_from(data, header_at)
            )
            optional_at = header_at + FILE_HEADER.size
            where = "optional header"
            (self.magic,) = OPTIONAL_MAGIC.unpack_from(data, optional_at)
            if self.magic not in RVA_COUNT_OFFSET:
                raise FormatError(f"{source}: offset {optional_at}: unknown optional header magic 0x{self.magic:x}; give an x86-64 or x86 DLL")
            count_at = optional_at + RVA_COUNT_OFFSET[self.magic]
            (directory_count,) = U32.unpack_from(data, count_at)
            self.directories = [
                DATA_DIRECTORY.unpack_from(data, count_at + 4 + i * DATA_DIRECTORY.size)
                for i in range(min(directory_count, 16))
            ]
            where = "section table"
            sections_at = optional_at + optional_size
            self.sections = []
            for i in range(section_count):
                name, virtual_size, address, raw_size, raw_at, _r, _l, _rc, _lc, flags = SECTION_HEADER.unpack_from(
                    data, sections_at + i * SECTION_HEADER.size
                )
                self.sections.append(
                    Section(name.rstrip(b"\0").decode("latin-1"), address, virtual_size, raw_at, raw_size, flags)
                )
        except struct.error:
            raise FormatError(f"{source}: {where} truncated; the DLL is damaged: give the one the linker wrote") from None

    @property
    def is_dll(self) -> bool:
        return bool(self.characteristics & CHARACTERISTIC_DLL)

    def directory(self, index: int) -> tuple[int, int]:
        return self.directories[index] if index < len(self.directories) else (0, 0)

    def section_of(self, rva: int) -> Section | None:
        for section in self.sections:
            if section.address <= rva < section.address + max(section.virtual_size, section.raw_size):
                return section
        return None

    def offset(self, rva: int) -> int:
        section = self.section_of(rva)
        if section is not None:
            at = section.raw_offset + rva - section.address
            if at < len(self.data):
                return at
        raise FormatError(f"{self.source}: RVA 0x{rva:x} lies in no section of the file; the DLL is damaged: give the one the linker wrote")

    def string(self, rva: int, what: str) -> str:
        start = self.offset(rva)
        end = self.data.find(b"\0", start)
        if end < 0:
            raise FormatError(f"{self.source}: offset {start}: {what} is not NUL-terminated; the DLL is damaged: give the one the linker wrote")
        try:
            return self.data[start:end].decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError(f"{self.source}: offset {start}: {what} is not UTF-8; the DLL is damaged: give the one the linker wrote") from None

    def exports(self) -> dict[str, ExportType]:
        """Exported name -> ``"code"`` or ``"data"`` (forwarders count as code)."""
        export_rva, export_size = self.directory(EXPORT_TABLE)
        if export_rva == 0 or export_size == 0:
            return {}
        where = "export directory"
        try:
            directory = EXPORT_DIRECTORY.unpack_from(self.data, self.offset(export_rva))
            address_count, name_count = directory[6], directory[7]
            addresses_rva, names_rva, ordinals_rva = directory[8], directory[9], directory[10]
            if not name_count:
                return {}
            where = "export name table"
            names_at, ordinals_at = self.offset(names_rva), self.offset(ordinals_rva)
            addresses_at = self.offset(addresses_rva) if address_count else 0
            found: dict[str, ExportType] = {}
            for index in range(name_count):
                (name_rva,) = U32.unpack_from(self.data, names_at + 4 * index)
                name = self.string(name_rva, "an export name")
                (slot,) = U16.unpack_from(self.data, ordinals_at + 2 * index)
                kind: ExportType = "code"
                if slot < address_count:
                    (target,) = U32.unpack_from(self.data, addresses_at + 4 * slot)
                    forwarded = export_rva <= target < export_rva + export_size
                    section = self.section_of(target)
                    if not forwarded and section is not None and not section.characteristics & SECTION_EXECUTABLE:
                        kind = "data"
                found[name] = kind
            return found
        except struct.error:
            raise FormatError(f"{self.source}: {where} truncated; the DLL is damaged: give the one the linker wrote") from None

    def imports(self) -> dict[str, list[str | int]]:
        """Imported DLL name -> the names (or ordinals) taken from it, in the file's order."""
        import_rva, import_size = self.directory(IMPORT_TABLE)
        if import_rva == 0 or import_size == 0:
            return {}
        entry, top_bit = (U64, 1 << 63) if self.magic == PE32_PLUS_MAGIC else (U32, 1 << 31)
        where = "import directory"
        found: dict[str, list[str | int]] = {}
        try:
            at = self.offset(import_rva)
            for _ in range(MAX_IMPORTED_DLLS):
                lookup_rva, _t, _f, name_rva, address_rva = IMPORT_DESCRIPTOR.unpack_from(self.data, at)
                if not (lookup_rva or name_rva or address_rva):
                    return found
                dll = self.string(name_rva, "an imported DLL's name")
                where = f"import lookup table of {dll}"
                table_at = self.offset(lookup_rva or address_rva)
                names = found.setdefault(dll, [])
                for index in range(MAX_IMPORTS_PER_DLL):
                    (value,) = entry.unpack_from(self.data, table_at + index * entry.size)
                    if value == 0:
                        break
                    if value & top_bit:
                        names.append(value & 0xFFFF)
                    else:
                        names.append(self.string((value & 0x7FFFFFFF) + 2, f"a name imported from {dll}"))
                at += IMPORT_DESCRIPTOR.size
                where = "import directory"
            raise FormatError(f"{self.source}: the import directory does not end; the DLL is damaged: give the one the linker wrote")
        except struct.error:
            raise FormatError(f"{self.source}: {where} truncated; the DLL is damaged: give the one the linker wrote") from None
