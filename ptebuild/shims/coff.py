"""Write a COFF x86-64 import library (``.lib``) for a DLL, byte for byte like LLVM does.

Specs: Microsoft PE/COFF specification, "Archive (Library) File Format" and "Import Library
Format"; LLVM's llvm/lib/Object/COFFImportFile.cpp and ArchiveWriter.cpp; the byte map in
``/work/shared/docs/coff-import-library.md``. Nothing here depends on the clock, the user or the
file system: the same :class:`ShimList` always gives the same bytes.

Archive (``!<arch>\\n``, then members at even offsets; each a 60-byte ASCII header: name 16,
date 12, uid 6, gid 6, octal mode 8, decimal size 10, ``\\x60\\n``; we write date/uid/gid 0):

- ``gnu`` (llvm-dlltool 14-18): ``/`` symbol table, ``//`` long names, objects.
- ``coff`` (MSVC lib.exe, LLVM >= 19): ``/`` first linker member, ``/`` second linker member,
  ``//``, objects. More than 0xFFFE members do not fit its u16 indices: LLVM then writes gnu.

``/`` (first linker member): u32 BE symbol count N, N x u32 BE absolute member offsets, N NUL-
terminated names, ``\\0`` pad (counted in the size). gnu lists every symbol of every member in
member order; coff lists only a name's first occurrence. Second linker member: u32 LE member count
M, M x u32 LE offsets, u32 LE N, N x u16 LE 1-based member index, N names sorted as bytes.
``//``: the DLL name once (gnu ``name/\\n``, coff ``name\\0``), ``\\n`` pad counted; every object
member is named ``/0`` then, or ``name/`` when the name is < 16 bytes without ``/``. An object of
odd size is followed by a ``\\n`` not counted in its size. Object headers have mode ``644``.

Objects, in order (L = len(dll), stem = dll minus its last 4 bytes, as LLVM's ``drop_back(4)``):

1. import descriptor: sections ``.idata$2`` (20 zero bytes, 3 ADDR32NB relocations) and
   ``.idata$6`` (dll + NUL); 7 symbols; defines ``__IMPORT_DESCRIPTOR_<stem>``.
2. null import descriptor: ``.idata$3`` (20 zero bytes); defines ``__NULL_IMPORT_DESCRIPTOR``.
3. null thunk: ``.idata$5`` and ``.idata$4`` (8 zero bytes each); defines ``\\x7f<stem>_NULL_THUNK_DATA``.
4. one short import per non-PRIVATE export: u16 0, u16 0xFFFF, u16 version 0, u16 machine,
   u32 time 0, u32 SizeOfData, u16 ordinal/hint, u16 TypeInfo = NameType << 2 | ImportType, then
   name NUL dll NUL. Defines ``__imp_<name>`` and, unless DATA, ``<name>``.
"""

from __future__ import annotations

import struct
from typing import Literal, get_args

from ptebuild.errors import UsageError
from ptebuild.shims.model import IMPORT_TYPE_OF, Export, ImportNameType, ShimList

Layout = Literal["gnu", "coff"]
LAYOUTS: tuple[str, ...] = get_args(Layout)

ARCHIVE_MAGIC = b"!<arch>\n"
MEMBER_HEADER_SIZE = 60
MEMBER_HEADER_END = b"`\n"
MACHINE_AMD64 = 0x8664
MAX_COFF_MEMBERS = 0xFFFE

COFF_FILE_HEADER = struct.Struct("<HHIIIHH")  # machine, sections, time, symtab ptr, symbols, opt size, flags
COFF_SECTION_HEADER = struct.Struct("<8sIIIIIIHHI")
COFF_RELOCATION = struct.Struct("<IIH")  # virtual address, symbol index, type
COFF_SYMBOL = struct.Struct("<8sIhHBB")  # name, value, section number, type, storage class, aux count
COFF_LONG_NAME = struct.Struct("<II")  # zeroes, offset into the string table
SHORT_IMPORT_HEADER = struct.Struct("<HHHHIIHH")
SHORT_IMPORT_SIG2 = 0xFFFF
U32_BE = struct.Struct(">I")
U32_LE = struct.Struct("<I")
U16_LE = struct.Struct("<H")

IMAGE_REL_AMD64_ADDR32NB = 3
IMAGE_SYM_CLASS_EXTERNAL = 2
IMAGE_SYM_CLASS_STATIC = 3
IMAGE_SYM_CLASS_SECTION = 0x68
# IMAGE_SCN_CNT_INITIALIZED_DATA | MEM_READ | MEM_WRITE, with the alignment bits.
SCN_DATA_ALIGN2 = 0xC0200040
SCN_DATA_ALIGN4 = 0xC0300040
SCN_DATA_ALIGN8 = 0xC0400040

NULL_IMPORT_DESCRIPTOR = b"__NULL_IMPORT_DESCRIPTOR"


def library_stem(dll: bytes) -> bytes:
    """The ``<stem>`` of the descriptor symbols: LLVM drops the last 4 bytes (".dll")."""
    return dll[:-4] if len(dll) >= 4 else dll  # llvm's drop_back(4) clamps on short names


def _string_table(names: list[bytes]) -> bytes:
    body = b"".join(name + b"\0" for name in names)
    return U32_LE.pack(4 + len(body)) + body


def _symbol(name_or_offset: bytes | int, section: int, storage_class: int) -> bytes:
    name = COFF_LONG_NAME.pack(0, name_or_offset) if isinstance(name_or_offset, int) else name_or_offset
    return COFF_SYMBOL.pack(name, 0, section, 0, storage_class, 0)


def import_descriptor(dll: bytes, machine: int = MACHINE_AMD64) -> bytes:
    """Object 1: points the linker at the DLL name and pulls in the two terminators."""
    stem = library_stem(dll)
    descriptor = b"__IMPORT_DESCRIPTOR_" + stem
    thunk = b"\x7f" + stem + b"_NULL_THUNK_DATA"
    headers_end = COFF_FILE_HEADER.size + 2 * COFF_SECTION_HEADER.size  # 100
    relocations_at = headers_end + 20
    name_at = relocations_at + 3 * COFF_RELOCATION.size
    symbols_at = name_at + len(dll) + 1
    parts = [
        COFF_FILE_HEADER.pack(machine, 2, 0, symbols_at, 7, 0, 0),
        COFF_SECTION_HEADER.pack(b".idata$2", 0, 0, 20, headers_end, relocations_at, 0, 3, 0, SCN_DATA_ALIGN4),
        COFF_SECTION_HEADER.pack(b".idata$6", 0, 0, len(dll) + 1, name_at, 0, 0, 0, 0, SCN_DATA_ALIGN2),
        bytes(20),
        # NameRVA -> .idata$6, ImportLookupTableRVA -> .idata$4, ImportAddressTableRVA -> .idata$5
        COFF_RELOCATION.pack(12, 2, IMAGE_REL_AMD64_ADDR32NB),
        COFF_RELOCATION.pack(0, 3, IMAGE_REL_AMD64_ADDR32NB),
        COFF_RELOCATION.pack(16, 4, IMAGE_REL_AMD64_ADDR32NB),
        dll + b"\0",
        _symbol(4, 1, IMAGE_SYM_CLASS_EXTERNAL),
        _symbol(b".idata$2", 1, IMAGE_SYM_CLASS_SECTION),
        _symbol(b".idata$6", 2, IMAGE_SYM_CLASS_STATIC),
        _symbol(b".idata$4", 0, IMAGE_SYM_CLASS_SECTION),
        _symbol(b".idata$5", 0, IMAGE_SYM_CLASS_SECTION),
        _symbol(4 + len(descriptor) + 1, 0, IMAGE_SYM_CLASS_EXTERNAL),
        _symbol(4 + len(descriptor) + 1 + len(NULL_IMPORT_DESCRIPTOR) + 1, 0, IMAGE_SYM_CLASS_EXTERNAL),
        _string_table([descriptor, NULL_IMPORT_DESCRIPTOR, thunk]),
    ]
    return b"".join(parts)


def null_import_descriptor(machine: int = MACHINE_AMD64) -> bytes:
    """Object 2: the all-zero entry that ends the import directory."""
    headers_end = COFF_FILE_HEADER.size + COFF_SECTION_HEADER.size  # 60
    return b"".join(
        [
            COFF_FILE_HEADER.pack(machine, 1, 0, headers_end + 20, 1, 0, 0),
            COFF_SECTION_HEADER.pack(b".idata$3", 0, 0, 20, headers_end, 0, 0, 0, 0, SCN_DATA_ALIGN4),
            bytes(20),
            _symbol(4, 1, IMAGE_SYM_CLASS_EXTERNAL),
            _string_table([NULL_IMPORT_DESCRIPTOR]),
        ]
    )


def null_thunk(dll: bytes, machine: int = MACHINE_AMD64) -> bytes:
    """Object 3: the zero entries that end this DLL's lookup and address tables."""
    thunk = b"\x7f" + library_stem(dll) + b"_NULL_THUNK_DATA"
    headers_end = COFF_FILE_HEADER.size + 2 * COFF_SECTION_HEADER.size  # 100
    return b"".join(
        [
            COFF_FILE_HEADER.pack(machine, 2, 0, headers_end + 16, 1, 0, 0),
            COFF_SECTION_HEADER.pack(b".idata$5", 0, 0, 8, headers_end, 0, 0, 0, 0, SCN_DATA_ALIGN8),
            COFF_SECTION_HEADER.pack(b".idata$4", 0, 0, 8, headers_end + 8, 0, 0, 0, 0, SCN_DATA_ALIGN8),
            bytes(16),
            _symbol(4, 1, IMAGE_SYM_CLASS_EXTERNAL),
            _string_table([thunk]),
        ]
    )


def short_import(export: Export, dll: bytes, machine: int = MACHINE_AMD64) -> tuple[bytes, list[bytes]]:
    """One export as a short import object, with the archive symbols it defines."""
    name = export.name.encode("utf-8")
    name_type = ImportNameType.ORDINAL if export.noname else ImportNameType.NAME
    import_type = IMPORT_TYPE_OF[export.type]
    header = SHORT_IMPORT_HEADER.pack(
        0, SHORT_IMPORT_SIG2, 0, machine, 0, len(name) + len(dll) + 2, export.ordinal or 0, name_type << 2 | import_type
    )
    symbols = [b"__imp_" + name] if export.type == "data" else [b"__imp_" + name, name]
    return b"".join((header, name, b"\0", dll, b"\0")), symbols


def _header(name: bytes, size: int, mode: bytes = b"644") -> bytes:
    return b"%-16s%-12s%-6s%-6s%-8s%-10d`\n" % (name, b"0", b"0", b"0", mode, size)


def write_archive(dll: bytes, objects: list[tuple[bytes, list[bytes]]], layout: Layout) -> bytes:
    """Lay out ``objects`` (data, defined symbols), all named ``dll``, as an archive."""
    if layout not in LAYOUTS:
        raise UsageError(f"unknown import library format {layout!r}; use one of {', '.join(LAYOUTS)}")
    if layout == "coff" and len(objects) > MAX_COFF_MEMBERS:
        layout = "gnu"  # what LLVM does: the second linker member's u16 indices cannot count them
    long_name = len(dll) >= 16 or b"/" in dll
    if long_name:
        names = dll + (b"\0" if layout == "coff" else b"/\n")
        if len(names) % 2:
            names += b"\n"
        string_member = b"%-48s%-10d`\n" % (b"//", len(names)) + names
        member_name = b"/0"
    else:
        string_member = b""
        member_name = dll + b"/"

    member_headers: list[bytes] = []
    member_sizes: list[int] = []
    for data, _symbols in objects:
        header = _header(member_name, len(data))
        member_headers.append(header)
        member_sizes.append(len(header) + len(data) + (len(data) & 1))

    if layout == "gnu":
        table_symbols = [(index, name) for index, (_, symbols) in enumerate(objects) for name in symbols]
    else:
        first: dict[bytes, int] = {}
        for index, (_, symbols) in enumerate(objects):
            for name in symbols:
                first.setdefault(name, index)
        table_symbols = [(index, name) for name, index in first.items()]
    names_blob = b"".join(name + b"\0" for _, name in table_symbols)
    first_size = 4 + 4 * len(table_symbols) + len(names_blob)
    first_pad = first_size & 1
    first_size += first_pad
    headers_size = len(ARCHIVE_MAGIC) + MEMBER_HEADER_SIZE + first_size
    if layout == "coff":
        sorted_symbols = sorted(first.items())
        second_size = 8 + 4 * len(objects) + sum(2 + len(name) + 1 for name, _ in sorted_symbols)
        second_pad = second_size & 1
        second_size += second_pad
        headers_size += MEMBER_HEADER_SIZE + second_size
    headers_size += len(string_member)

    offsets = []
    position = headers_size
    for size in member_sizes:
        offsets.append(position)
        position += size

    out = [ARCHIVE_MAGIC, _header(b"/", first_size, b"0"), U32_BE.pack(len(table_symbols))]
    out.append(struct.pack(f">{len(table_symbols)}I", *(offsets[index] for index, _ in table_symbols)))
    out.append(names_blob + b"\0" * first_pad)
    if layout == "coff":
        out.append(_header(b"/", second_size, b"0"))
        out.append(U32_LE.pack(len(objects)) + struct.pack(f"<{len(offsets)}I", *offsets))
        out.append(U32_LE.pack(len(sorted_symbols)))
        out.append(struct.pack(f"<{len(sorted_symbols)}H", *(index + 1 for _, index in sorted_symbols)))
        out.append(b"".join(name + b"\0" for name, _ in sorted_symbols) + b"\0" * second_pad)
    out.append(string_member)
    for header, (data, _symbols) in zip(member_headers, objects):
        out.append(header)
        out.append(data)
        if len(data) & 1:
            out.append(b"\n")
    return b"".join(out)


def write_import_library(shims: ShimList, fmt: str = "gnu", keep_order: bool = False) -> bytes:
    """The import library of ``shims`` as bytes.

    ``fmt`` is ``"gnu"`` (llvm-dlltool 14-18) or ``"coff"`` (lib.exe, LLVM >= 19). By default the
    exports are sorted and de-duplicated (:meth:`ShimList.canonical`), so any order of the same set
    gives the same bytes; ``keep_order`` keeps the source order and identical duplicates, as
    llvm-dlltool does.
    Raises :class:`UsageError` for an unknown format or conflicting duplicate exports.
    """
    if fmt not in LAYOUTS:
        raise UsageError(f"unknown import library format {fmt!r}; use one of {', '.join(LAYOUTS)}")
    canonical = shims.canonical()  # refuses one name with two meanings, even when keeping the order
    if not keep_order:
        shims = canonical
    dll = shims.dll.encode("utf-8")
    objects: list[tuple[bytes, list[bytes]]] = [
        (import_descriptor(dll), [b"__IMPORT_DESCRIPTOR_" + library_stem(dll)]),
        (null_import_descriptor(), [NULL_IMPORT_DESCRIPTOR]),
        (null_thunk(dll), [b"\x7f" + library_stem(dll) + b"_NULL_THUNK_DATA"]),
    ]
    objects.extend(short_import(export, dll) for export in shims.exports if not export.private)
    return write_archive(dll, objects, fmt)  # type: ignore[arg-type]
