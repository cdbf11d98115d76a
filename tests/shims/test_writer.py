"""The import library writer: byte equality with llvm-dlltool, determinism, the coff layout, linking."""

from __future__ import annotations

import random
import struct
import subprocess

import pytest
from shim_tools import SHIPPED_DEF, dlltool, require_tool

from ptebuild.errors import UsageError
from ptebuild.shims import Export, ShimList, load_shim_list, parse_def, write_import_library
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


def test_parse_def_needs_a_dll_name():
    with pytest.raises(UsageError, match=r"x.def: no DLL name; add 'LIBRARY aoti_cuda_shims.dll' or pass --dll"):
        parse_def("EXPORTS\n  f\n", "x.def")
