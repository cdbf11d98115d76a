"""Read a COFF import library (``.lib``) back into a :class:`ShimList`.

The byte layout is described in :mod:`ptebuild.shims.coff`. The reader accepts both layouts
(gnu: one ``/`` member; coff/MSVC: two) and libraries made by MSVC's lib.exe, which carry real or
/Brepro-hashed timestamps, other modes and ``@comp.id`` symbols: header fields other than the
name and size are not interpreted.

Every member must lie inside the file, odd-sized members must be followed by their pad byte, and
every offset in the linker members must point at a member: so a file cut at any byte is reported,
never read as a shorter library. Short imports (data starting ``00 00 FF FF`` with version 0) are
the exports; the import descriptor's ``.idata$6`` section gives the DLL name of a library without
exports. Any malformed part raises :class:`FormatError` naming the file, the part and its offset.
"""

from __future__ import annotations

import dataclasses
import struct

from ptebuild.errors import FormatError, UsageError
from ptebuild.shims.coff import (
    ARCHIVE_MAGIC,
    COFF_FILE_HEADER,
    COFF_SECTION_HEADER,
    MEMBER_HEADER_END,
    MEMBER_HEADER_SIZE,
    SHORT_IMPORT_HEADER,
    U32_BE,
    U32_LE,
)
from ptebuild.shims.model import EXPORT_TYPE_OF, Export, ImportNameType, ImportType, ShimList

THIN_MAGIC = b"!<thin>\n"
SKIPPED_SPECIAL_MEMBERS = (b"/<ECSYMBOLS>", b"/<HYBRIDMAP>", b"/SYM64/")
SHORT_IMPORT_SIG1 = b"\0\0\xff\xff"
_NAME_TYPE_VALUES = {int(v) for v in ImportNameType}
_EXPORT_TYPE_BY_VALUE = {int(v): EXPORT_TYPE_OF[v] for v in ImportType}


@dataclasses.dataclass(slots=True)
class Member:
    offset: int  # of the 60-byte header, from the start of the file
    name: bytes  # raw header name field, right-stripped
    data: bytes

    @property
    def data_offset(self) -> int:
        return self.offset + MEMBER_HEADER_SIZE


@dataclasses.dataclass(frozen=True)
class ImportLibrary:
    """What a ``.lib`` holds: the shim list (archive order) and its layout (``gnu``/``coff``)."""

    shims: ShimList
    layout: str


def _error(source: str, offset: int, what: str, fix: str = "the file is damaged or not an import library") -> FormatError:
    return FormatError(f"{source}: offset {offset}: {what}; {fix}")


def split_members(data: bytes, source: str) -> list[Member]:
    """The archive's members, checked for bounds and padding. Raises :class:`FormatError`."""
    if not data.startswith(ARCHIVE_MAGIC):
        if data.startswith(THIN_MAGIC):
            raise _error(source, 0, "a thin archive references its members by path", "pass a regular .lib")
        if len(data) < len(ARCHIVE_MAGIC) and ARCHIVE_MAGIC.startswith(data):
            raise _error(source, 0, f"file ends inside the archive magic ({len(data)} of 8 bytes)", "the file is truncated")
        raise _error(source, 0, "not an archive (no '!<arch>' magic)", "pass a Windows import library (.lib)")
    members: list[Member] = []
    position = len(ARCHIVE_MAGIC)
    end_of_file = len(data)
    while position < end_of_file:
        header = data[position : position + MEMBER_HEADER_SIZE]
        if len(header) < MEMBER_HEADER_SIZE:
            raise _error(source, position, f"member header truncated ({len(header)} of 60 bytes)", "the file is truncated")
        if header[58:60] != MEMBER_HEADER_END:
            raise _error(source, position, "member header does not end with '`\\n'")
        size_field = header[48:58].strip(b" ")
        if not size_field.isdigit():
            raise _error(source, position, f"member size {size_field.decode('latin-1')!r} is not a decimal number")
        size = int(size_field)
        start = position + MEMBER_HEADER_SIZE
        if start + size > end_of_file:
            raise _error(
                source, start, f"member data truncated ({size} bytes declared, {end_of_file - start} present)",
                "the file is truncated",
            )
        if size % 2 and start + size >= end_of_file:
            raise _error(source, start + size, "missing the pad byte after an odd-sized member", "the file is truncated")
        members.append(Member(position, header[:16].rstrip(b" "), data[start : start + size]))
        position = start + size + size % 2
    return members


def _check_first_linker_member(member: Member, starts: set[int], source: str) -> None:
    data = member.data
    try:
        (count,) = U32_BE.unpack_from(data, 0)
        offsets = struct.unpack_from(f">{count}I", data, 4) if 4 + 4 * count <= len(data) else None
    except struct.error:
        offsets = None
    if offsets is None:
        raise _error(source, member.data_offset, "symbol table (first linker member) shorter than its symbol count")
    if not starts.issuperset(offsets):
        index, offset = next((i, o) for i, o in enumerate(offsets) if o not in starts)
        raise _error(
            source, member.data_offset + 4 + 4 * index,
            f"symbol table points at offset {offset}, which is not a member", "the file is truncated or damaged",
        )
    if data[4 + 4 * count :].count(b"\0") < count:
        raise _error(source, member.data_offset, "symbol table has fewer names than its symbol count")


def _check_second_linker_member(member: Member, starts: set[int], member_count: int, source: str) -> None:
    data = member.data
    try:
        (count,) = U32_LE.unpack_from(data, 0)
        offsets = struct.unpack_from(f"<{count}I", data, 4)
        (symbols,) = U32_LE.unpack_from(data, 4 + 4 * count)
        indices = struct.unpack_from(f"<{symbols}H", data, 8 + 4 * count)
    except struct.error:
        raise _error(source, member.data_offset, "second linker member shorter than its counts say") from None
    for index, offset in enumerate(offsets):
        if offset not in starts:
            raise _error(
                source, member.data_offset + 4 + 4 * index,
                f"second linker member points at offset {offset}, which is not a member", "the file is truncated or damaged",
            )
    if any(not 1 <= i <= count for i in indices):
        raise _error(source, member.data_offset, "second linker member has a member index out of range")
    if data[8 + 4 * count + 2 * symbols :].count(b"\0") < symbols:
        raise _error(source, member.data_offset, "second linker member has fewer names than its symbol count")


def _c_string(data: bytes, start: int, limit: int) -> bytes | None:
    end = data.find(b"\0", start, limit)
    return None if end < 0 else data[start:end]


def _short_import(member: Member, source: str) -> tuple[Export, bytes]:
    data = member.data
    if len(data) < SHORT_IMPORT_HEADER.size:
        raise _error(source, member.data_offset, f"short import header truncated ({len(data)} of 20 bytes)")
    _sig1, _sig2, _version, _machine, _time, size_of_data, ordinal, type_info = SHORT_IMPORT_HEADER.unpack_from(data)
    limit = SHORT_IMPORT_HEADER.size + size_of_data
    if limit > len(data):
        raise _error(source, member.data_offset + 12, f"short import says {size_of_data} bytes of names, {len(data) - 20} present")
    name = _c_string(data, SHORT_IMPORT_HEADER.size, limit)
    dll = _c_string(data, SHORT_IMPORT_HEADER.size + len(name) + 1, limit) if name is not None else None
    if name is None or dll is None:
        raise _error(source, member.data_offset + 20, "short import names are not NUL-terminated")
    import_type, name_type = type_info & 3, (type_info >> 2) & 7
    if import_type not in _EXPORT_TYPE_BY_VALUE or name_type not in _NAME_TYPE_VALUES:
        raise _error(source, member.data_offset + 18, f"short import has unknown type bits 0x{type_info:04x}")
    try:
        text = name.decode("utf-8")
        export = Export(text, _EXPORT_TYPE_BY_VALUE[import_type], ordinal or None, name_type == ImportNameType.ORDINAL)
    except UnicodeDecodeError:
        raise _error(source, member.data_offset + 20, "import name is not UTF-8") from None
    except UsageError as exc:
        raise _error(source, member.data_offset + 20, str(exc).split(";")[0], "this import cannot be linked") from None
    return export, dll


def _descriptor_dll_name(member: Member, source: str) -> bytes | None:
    """The DLL name in an import descriptor's ``.idata$6`` section, or None for other objects."""
    data = member.data
    try:
        _machine, sections, *_rest = COFF_FILE_HEADER.unpack_from(data, 0)
        optional_size = _rest[-2]
        for index in range(sections):
            at = COFF_FILE_HEADER.size + optional_size + index * COFF_SECTION_HEADER.size
            name, _vs, _va, raw_size, raw_at, *_ = COFF_SECTION_HEADER.unpack_from(data, at)
            if name == b".idata$6":
                if raw_at + raw_size > len(data):
                    raise _error(source, member.data_offset + at, ".idata$6 section lies outside its object")
                return data[raw_at : raw_at + raw_size].split(b"\0", 1)[0]
    except struct.error:
        raise _error(source, member.data_offset, "object file header truncated") from None
    return None


def inspect_import_library(data: bytes, source: str) -> ImportLibrary:
    """Read ``data`` (the bytes of ``source``) as an import library. Raises :class:`FormatError`."""
    members = split_members(data, source)
    starts = {m.offset for m in members}
    linker_members = [m for m in members if m.name == b"/"]
    if not linker_members:
        raise _error(source, len(ARCHIVE_MAGIC), "archive has no symbol table ('/' member)", "a linker cannot use it; rebuild it")
    _check_first_linker_member(linker_members[0], starts, source)
    objects = [m for m in members if m.name not in (b"/", b"//") and m.name not in SKIPPED_SPECIAL_MEMBERS]
    if len(linker_members) > 1:
        _check_second_linker_member(linker_members[1], starts, len(objects), source)
    exports: list[Export] = []
    dll_names: dict[bytes, int] = {}
    descriptor_dll: bytes | None = None
    for member in objects:
        if member.data[:4] == SHORT_IMPORT_SIG1 and member.data[4:6] == b"\0\0":
            export, dll = _short_import(member, source)
            exports.append(export)
            dll_names.setdefault(dll, member.offset)
        elif member.data[:4] != SHORT_IMPORT_SIG1 and descriptor_dll is None:
            descriptor_dll = _descriptor_dll_name(member, source)
    if len(dll_names) > 1:
        names = ", ".join(n.decode("utf-8", "replace") for n in dll_names)
        raise FormatError(f"{source}: imports from several DLLs ({names}); give an import library of one DLL")
    library = next(iter(dll_names), descriptor_dll)
    if library is None:
        raise FormatError(f"{source}: no import descriptor and no imports, so not an import library; give a .lib that imports from a DLL")
    try:
        shims = ShimList(library.decode("utf-8"), tuple(exports))
    except (UnicodeDecodeError, UsageError) as exc:
        raise FormatError(f"{source}: unusable DLL name {library!r}: {exc.message if isinstance(exc, UsageError) else exc}; "
                          "give an import library of a DLL with a plain name") from None
    return ImportLibrary(shims, "coff" if len(linker_members) > 1 else "gnu")


def read_import_library(data: bytes, source: str) -> ShimList:
    """The DLL and exports of an import library, in archive order. Raises :class:`FormatError`."""
    return inspect_import_library(data, source).shims
