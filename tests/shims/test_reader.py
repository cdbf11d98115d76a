"""Reading import libraries back: round trips, every truncation, hostile headers, MSVC-style files."""

from __future__ import annotations

import re
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shim_tools import SHIPPED_DEF, dlltool

from ptebuild.errors import FormatError
from ptebuild.shims import Export, ShimList, load_shim_list, read_import_library, write_import_library
from ptebuild.shims.deffile import format_def, parse_def
from ptebuild.shims.reader import inspect_import_library, split_members

SMALL = ShimList("aoti_cuda_shims.dll", (Export("aoti_torch_check"), Export("t", "data"), Export("n", ordinal=3, noname=True)))

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_?$.", min_size=1, max_size=40)
exports = st.builds(
    lambda name, kind, ordinal, noname: Export(name, kind, ordinal or (1 if noname else None), noname and True),
    names, st.sampled_from(["code", "data", "const"]), st.one_of(st.none(), st.integers(1, 0xFFFF)), st.booleans(),
)
dlls = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_ .-]{0,30}\.dll", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(dll=dlls, exports=st.lists(exports, max_size=20, unique_by=lambda e: e.name), fmt=st.sampled_from(["gnu", "coff"]))
def test_write_then_read_gives_the_exports_back(dll, exports, fmt):
    shims = ShimList(dll, tuple(exports))
    library = inspect_import_library(write_import_library(shims, fmt, keep_order=True), "x.lib")
    assert library.shims == shims
    if len(exports) + 3 <= 0xFFFE:
        assert library.layout == fmt


@settings(max_examples=60, deadline=None)
@given(dll=dlls, exports=st.lists(exports, max_size=20, unique_by=lambda e: e.name))
def test_def_text_round_trips(dll, exports):
    shims = ShimList(dll, tuple(exports))
    assert parse_def(format_def(shims), "x.def") == shims


def test_reads_llvm_dlltool_output(tmp_path):
    expected = load_shim_list(SHIPPED_DEF)
    assert read_import_library(dlltool(SHIPPED_DEF, expected.dll, tmp_path / "r.lib"), "r.lib") == expected


@pytest.mark.parametrize("fmt", ["gnu", "coff"])
def test_every_truncation_is_one_clear_error(fmt):
    data = write_import_library(SMALL, fmt)
    for length in range(len(data)):
        with pytest.raises(FormatError) as info:
            read_import_library(data[:length], "cut.lib")
        message = str(info.value)
        assert message.startswith("cut.lib: ") and "\n" not in message, (length, message)


def _replace_header_field(data: bytes, member_offset: int, start: int, width: int, value: bytes) -> bytes:
    at = member_offset + start
    return data[:at] + value.ljust(width) + data[at + width :]


BAD_INPUTS = {
    "empty": (b"", "offset 0: file ends inside the archive magic"),
    "elf": (b"\x7fELF\x02\x01\x01" + bytes(60), "offset 0: not an archive"),
    "thin": (b"!<thin>\n", "offset 0: a thin archive"),
    "magic-only": (b"!<arch>\n", "archive has no symbol table"),
    "text": (b"LIBRARY x.dll\nEXPORTS\n f\n", "not an archive"),
}


@pytest.mark.parametrize("data, message", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_files(data, message):
    with pytest.raises(FormatError, match=re.escape(message)):
        read_import_library(data, "bad.lib")


def test_bad_member_headers():
    data = write_import_library(SMALL)
    first_object = split_members(data, "x")[2].offset
    cases = {
        "size not a number": _replace_header_field(data, 8, 48, 10, b"12x"),
        "terminator": _replace_header_field(data, 8, 58, 2, b"!!"),
        "size too large": _replace_header_field(data, first_object, 48, 10, b"999999"),
        "symbol table points nowhere": data[:76] + struct.pack(">I", 12345) + data[80:],
    }
    expected = {
        "size not a number": "offset 8: member size '12x' is not a decimal number",
        "terminator": "offset 8: member header does not end with",
        "size too large": "member data truncated (999999 bytes declared",
        "symbol table points nowhere": "symbol table points at offset 12345, which is not a member",
    }
    for name, bad in cases.items():
        with pytest.raises(FormatError, match=re.escape(expected[name])):
            read_import_library(bad, "bad.lib")


def test_bad_short_import():
    data = write_import_library(ShimList("a.dll", (Export("f"),)))
    member = split_members(data, "x")[-1]
    at = member.data_offset
    bad_type = data[: at + 18] + struct.pack("<H", 0x0007) + data[at + 20 :]
    with pytest.raises(FormatError, match=r"offset \d+: short import has unknown type bits 0x0007"):
        read_import_library(bad_type, "bad.lib")
    no_nul = data[: at + 20] + b"fff" + b"X" * (len(member.data) - 23) + data[at + len(member.data) :]
    with pytest.raises(FormatError, match="short import names are not NUL-terminated"):
        read_import_library(no_nul, "bad.lib")


def test_reads_msvc_style_library():
    """lib.exe writes real or /Brepro timestamps, other modes, blank uid/gid and stamped short imports."""
    data = bytearray(write_import_library(SMALL, "coff"))
    for member in split_members(bytes(data), "x"):
        header = b"%-16s%-12s%-6s%-6s%-8s" % (data[member.offset : member.offset + 16], b"1700000000", b"", b"", b"100666")
        data[member.offset : member.offset + 48] = header
        if member.data[:4] == b"\0\0\xff\xff":
            data[member.data_offset + 8 : member.data_offset + 12] = struct.pack("<I", 0xDEADBEEF)
    assert read_import_library(bytes(data), "msvc.lib") == SMALL.canonical()
