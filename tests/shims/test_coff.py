"""The import library writer (:mod:`ptebuild.shims.coff`): byte equality with llvm-dlltool, determinism,
the coff layout, linking.

Ours equals llvm-dlltool's bytes (``gnu``: LLVM 14-18) and LLVM 19's (``coff``: MSVC lib.exe's two
linker members) for every shape of ``.def`` and for 5000 exports; any order of one export set gives
the same bytes; nothing in a member header depends on the clock or the user; a ``coff`` library
too large for its u16 indices is written ``gnu``, as LLVM does; each export is one short import
object whose fields say its name, type and ordinal; lld-link imports through the library.
"""

from __future__ import annotations

import random
import struct
import subprocess

import pytest
from shim_tools import SHIPPED_DEF, dlltool, require_tool

from ptebuild.errors import UsageError
from ptebuild.shims import Export, ShimList, load_shim_list, write_import_library
from ptebuild.shims.coff import (
    MACHINE_AMD64,
    MAX_COFF_MEMBERS,
    SHORT_IMPORT_HEADER,
    SHORT_IMPORT_SIG2,
    import_descriptor,
    library_stem,
    null_import_descriptor,
    null_thunk,
    short_import,
    write_archive,
)
from ptebuild.shims.model import ImportNameType, ImportType
from ptebuild.shims.reader import inspect_import_library, split_members

DEF_CASES = {
    "one-export": "LIBRARY aoti_cuda_shims.dll\nEXPORTS\n    aoti_torch_check\n",
    "data-const": "LIBRARY aoti_cuda_shims.dll\nEXPORTS\n  a_table DATA\n  a_const CONSTANT\n  code_fn\n  both DATA CONSTANT\n",
    "noname-ordinals": "LIBRARY shim.dll\nEXPORTS\n  by_ord @7 NONAME\n  hinted @ 12\n  zero @0\n  max @65535 NONAME\n  plain\n",
    "short-dll": "LIBRARY x.dll\nEXPORTS\n  f\n  g DATA\n",
    "dll-15-chars": "LIBRARY abcdefghijk.dll\nEXPORTS\n  f\n",
    "dll-16-chars": "LIBRARY abcdefghijkl.dll\nEXPORTS\n  f\n",
    "dll-no-extension": "LIBRARY foo\nEXPORTS\n  f\n",
    "long-dll": "LIBRARY a_rather_long_name_for_a_shim_library.dll\nEXPORTS\n  f\n  g\n",
    "odd-even-sizes": "LIBRARY ab.dll\nEXPORTS\n  a\n  ab\n  abc\n  abcd\n",
    "private-alias-quoted": 'LIBRARY lib.dll\nEXPORTS\n  hidden PRIVATE\n  shown=internal\n  "DATA"\n  "semi;colon"\n',
    "duplicates-kept": "LIBRARY dup.dll\nEXPORTS\n  b\n  a\n  b\n",
    "no-exports": "LIBRARY empty.dll\nEXPORTS\n",
    "shipped-cuda-list": SHIPPED_DEF.read_text(),
}


@pytest.mark.parametrize("text", DEF_CASES.values(), ids=DEF_CASES.keys())
def test_gnu_layout_equals_llvm_dlltool(tmp_path, text):
    def_path = tmp_path / "in.def"
    def_path.write_text(text)
    shims = load_shim_list(def_path)
    expected = dlltool(def_path, shims.dll, tmp_path / "ref.lib")
    assert write_import_library(shims, "gnu", keep_order=True) == expected


@pytest.mark.parametrize("text", DEF_CASES.values(), ids=DEF_CASES.keys())
def test_coff_layout_equals_llvm_19_dlltool(tmp_path, text):
    """LLVM 19 writes the layout of MSVC's lib.exe (two linker members): ours is byte-identical."""
    def_path = tmp_path / "in.def"
    def_path.write_text(text)
    shims = load_shim_list(def_path)
    expected = dlltool(def_path, shims.dll, tmp_path / "ref.lib", tool="llvm-dlltool-19")
    assert write_import_library(shims, "coff", keep_order=True) == expected


def test_5000_exports_equal_llvm_dlltool(tmp_path):
    rng = random.Random(5000)
    lines = ["LIBRARY aoti_cuda_shims.dll", "EXPORTS"]
    for i in rng.sample(range(100000), 5000):
        suffix = rng.choice(["", "", "", " DATA", " CONSTANT", f" @{i % 65535 + 1}", f" @{i % 65535 + 1} NONAME"])
        lines.append(f"    shim_{i:05d}_{'x' * (i % 9)}{suffix}")
    def_path = tmp_path / "big.def"
    def_path.write_text("\n".join(lines) + "\n")
    expected = dlltool(def_path, "aoti_cuda_shims.dll", tmp_path / "ref.lib")
    shims = load_shim_list(def_path)
    assert write_import_library(shims, "gnu", keep_order=True) == expected
    coff = dlltool(def_path, "aoti_cuda_shims.dll", tmp_path / "ref19.lib", tool="llvm-dlltool-19")
    assert write_import_library(shims, "coff", keep_order=True) == coff
    # Sorted input gives llvm-dlltool's bytes for the default (sorted) mode too.
    sorted_def = tmp_path / "sorted.def"
    sorted_def.write_text("\n".join(lines[:2] + sorted(lines[2:], key=lambda l: l.split()[0])) + "\n")
    assert write_import_library(shims) == dlltool(sorted_def, "aoti_cuda_shims.dll", tmp_path / "sorted.lib")


def test_dll_option_overrides_library_like_dash_d(tmp_path):
    def_path = tmp_path / "in.def"
    def_path.write_text("LIBRARY other.dll\nEXPORTS\n  f\n")
    shims = load_shim_list(def_path, dll="aoti_cuda_shims.dll")
    assert write_import_library(shims, keep_order=True) == dlltool(def_path, "aoti_cuda_shims.dll", tmp_path / "r.lib")


@pytest.mark.parametrize("fmt", ["gnu", "coff"])
def test_any_order_of_the_same_set_gives_the_same_bytes(fmt):
    exports = [Export(f"s{i}", ["code", "data", "const"][i % 3]) for i in range(50)]
    reference = write_import_library(ShimList("aoti_cuda_shims.dll", tuple(exports)), fmt)
    for seed in range(5):
        shuffled = exports + exports[:10]
        random.Random(seed).shuffle(shuffled)
        assert write_import_library(ShimList("aoti_cuda_shims.dll", tuple(shuffled)), fmt) == reference


def test_conflicting_duplicates_are_refused_when_sorting():
    shims = ShimList("a.dll", (Export("x"), Export("x", "data")))
    with pytest.raises(UsageError, match="'x' is declared twice, as code and as DATA"):
        write_import_library(shims)


def test_unknown_format_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown import library format 'elf'"):
        write_import_library(ShimList("a.dll", (Export("x"),)), "elf")


def test_coff_layout_has_two_linker_members_and_same_objects():
    shims = load_shim_list(SHIPPED_DEF)
    gnu, coff = write_import_library(shims, "gnu"), write_import_library(shims, "coff")
    gnu_members, coff_members = split_members(gnu, "gnu"), split_members(coff, "coff")
    assert [m.name for m in coff_members[:3]] == [b"/", b"/", b"//"]
    assert [m.name for m in gnu_members[:2]] == [b"/", b"//"]
    assert coff_members[2].data == b"aoti_cuda_shims.dll\0"  # 20 bytes: no pad
    assert gnu_members[1].data == b"aoti_cuda_shims.dll/\n\n"
    assert [m.data for m in coff_members[3:]] == [m.data for m in gnu_members[2:]]
    # Second linker member: offsets of every object, names sorted as bytes, 1-based indices.
    second = coff_members[1].data
    (count,) = struct.unpack_from("<I", second)
    offsets = struct.unpack_from(f"<{count}I", second, 4)
    assert list(offsets) == [m.offset for m in coff_members[3:]]
    (symbols,) = struct.unpack_from("<I", second, 4 + 4 * count)
    indices = struct.unpack_from(f"<{symbols}H", second, 8 + 4 * count)
    names = second[8 + 4 * count + 2 * symbols :].split(b"\0")[:symbols]
    assert names == sorted(names) and names[-1].startswith(b"\x7f") and names[0].startswith(b"__IMPORT")
    assert min(indices) == 1 and max(indices) == count
    assert symbols == 3 + 2 * len(shims.exports)
    assert inspect_import_library(coff, "coff").layout == "coff"


def test_coff_layout_lists_a_duplicate_symbol_once():
    shims = ShimList("d.dll", (Export("b"), Export("a"), Export("b")))
    first = split_members(write_import_library(shims, "coff", keep_order=True), "x")[0].data
    assert struct.unpack_from(">I", first)[0] == 3 + 4


LINK_C = """
__declspec(dllimport) int aoti_torch_check(int);
__declspec(dllimport) int aoti_torch_get_numel(void *, long long *);
int mainCRTStartup(void) { long long n; aoti_torch_get_numel(0, &n); return aoti_torch_check(1); }
"""


@pytest.mark.parametrize("fmt", ["gnu", "coff"])
def test_lld_link_imports_two_shims_from_the_dll(tmp_path, fmt):
    clang, lld_link, readobj = (require_tool(t) for t in ("clang", "lld-link", "llvm-readobj"))
    (tmp_path / "use.c").write_text(LINK_C)
    subprocess.run([clang, "--target=x86_64-pc-windows-msvc", "-c", "use.c", "-o", "use.obj"], cwd=tmp_path, check=True)
    lib = tmp_path / "aoti_cuda_shims.lib"
    lib.write_bytes(write_import_library(load_shim_list(SHIPPED_DEF), fmt))
    subprocess.run(
        [lld_link, "/entry:mainCRTStartup", "/subsystem:console", "/nodefaultlib", "/out:use.exe", "use.obj", lib.name],
        cwd=tmp_path, check=True,
    )
    imports = subprocess.run([readobj, "--coff-imports", "use.exe"], cwd=tmp_path, check=True, capture_output=True, text=True)
    assert "Name: aoti_cuda_shims.dll" in imports.stdout
    assert "Symbol: aoti_torch_check" in imports.stdout
    assert "Symbol: aoti_torch_get_numel" in imports.stdout


@pytest.mark.parametrize(("dll", "stem"), [(b"aoti_cuda_shims.dll", b"aoti_cuda_shims"), (b"x.dll", b"x"), (b"libfoo", b"li"),
                                           (b"foo", b"foo"), (b"", b"")])
def test_the_descriptor_stem_drops_the_last_four_bytes_as_llvm_does(dll, stem):
    assert library_stem(dll) == stem
    assert b"__IMPORT_DESCRIPTOR_" + stem + b"\0" in import_descriptor(dll)
    assert b"\x7f" + stem + b"_NULL_THUNK_DATA\0" in null_thunk(dll)


@pytest.mark.parametrize(("export", "name_type", "import_type", "hint", "symbols"), [
    (Export("aoti_torch_check"), ImportNameType.NAME, ImportType.CODE, 0, [b"__imp_aoti_torch_check", b"aoti_torch_check"]),
    (Export("a_table", "data"), ImportNameType.NAME, ImportType.DATA, 0, [b"__imp_a_table"]),
    (Export("a_const", "const"), ImportNameType.NAME, ImportType.CONST, 0, [b"__imp_a_const", b"a_const"]),
    (Export("hinted", ordinal=12), ImportNameType.NAME, ImportType.CODE, 12, [b"__imp_hinted", b"hinted"]),
    (Export("by_ordinal", ordinal=7, noname=True), ImportNameType.ORDINAL, ImportType.CODE, 7, [b"__imp_by_ordinal", b"by_ordinal"]),
], ids=["code", "data", "const", "hint", "noname"])
def test_a_short_import_says_its_name_type_and_ordinal(export, name_type, import_type, hint, symbols):
    data, defined = short_import(export, b"shim.dll")
    sig1, sig2, version, machine, time, size, ordinal, type_info = SHORT_IMPORT_HEADER.unpack_from(data)
    assert (sig1, sig2, version, machine, time) == (0, SHORT_IMPORT_SIG2, 0, MACHINE_AMD64, 0)
    assert data[SHORT_IMPORT_HEADER.size:] == export.name.encode() + b"\0shim.dll\0"
    assert size == len(data) - SHORT_IMPORT_HEADER.size
    assert (ordinal, type_info >> 2, type_info & 3) == (hint, name_type, import_type)
    assert defined == symbols


def test_private_exports_are_left_out_of_the_library():
    shims = ShimList("lib.dll", (Export("hidden", private=True), Export("shown")))
    library = write_import_library(shims, keep_order=True)
    assert [e.name for e in inspect_import_library(library, "x").shims.exports] == ["shown"]
    assert b"hidden" not in library


@pytest.mark.parametrize("fmt", ["gnu", "coff"])
def test_no_member_header_says_when_or_by_whom_it_was_written(fmt):
    """Date, uid and gid are 0 in every header (blank in the long-names member's); objects have
    mode 644, linker members 0; every member starts at an even offset."""
    data = write_import_library(load_shim_list(SHIPPED_DEF), fmt)
    members = split_members(data, "x")
    assert b"//" in [m.name for m in members[:3]]  # the DLL's name is 16 bytes or more: a long-names member
    for member in members:
        header = data[member.offset : member.offset + 60]
        assert member.offset % 2 == 0
        if member.name == b"//":
            assert header[16:48] == b" " * 32  # as LLVM writes it: no date, owner or mode at all
            continue
        date, uid, gid, mode = header[16:28].strip(), header[28:34].strip(), header[34:40].strip(), header[40:48].strip()
        assert (date, uid, gid, mode) == (b"0", b"0", b"0", b"0" if member.name == b"/" else b"644")


def test_the_three_descriptor_objects_come_first():
    dll = b"aoti_cuda_shims.dll"
    data = write_import_library(ShimList(dll.decode(), (Export("f"),)), "gnu")
    objects = [m.data for m in split_members(data, "x")[2:]]
    assert objects[:3] == [import_descriptor(dll), null_import_descriptor(), null_thunk(dll)]
    assert objects[3] == short_import(Export("f"), dll)[0]
    assert len(objects) == 4


def test_a_coff_library_too_large_for_its_indices_is_written_gnu():
    """The second linker member counts members in u16: past 0xFFFE of them LLVM writes gnu, as we do."""
    objects = [short_import(Export(f"s{i:05d}"), b"big.dll") for i in range(MAX_COFF_MEMBERS + 1)]
    assert write_archive(b"big.dll", objects, "coff") == write_archive(b"big.dll", objects, "gnu")
    just_fits = write_archive(b"big.dll", objects[:-1], "coff")
    assert just_fits != write_archive(b"big.dll", objects[:-1], "gnu")
    first_size = int(just_fits[8 + 48 : 8 + 58])
    second = 8 + 60 + first_size
    assert just_fits[second : second + 16] == b"/".ljust(16)  # the second linker member: the coff layout


def test_an_unknown_layout_is_refused_by_the_archive_writer_too():
    with pytest.raises(UsageError, match="unknown import library format 'msvc'; use one of gnu, coff"):
        write_archive(b"a.dll", [(null_import_descriptor(), [b"__NULL_IMPORT_DESCRIPTOR"])], "msvc")  # type: ignore[arg-type]
