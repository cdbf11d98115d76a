"""`shims check`: the import library and the shared library against the declared list."""

from __future__ import annotations

import subprocess

import pytest
from shim_tools import SHIPPED_DEF, require_tool

from ptebuild.errors import FormatError
from ptebuild.shims import Export, ShimList, format_def, load_shim_list, write_import_library
from ptebuild.shims.check import defined_symbols

SO_SOURCE = """
int aoti_torch_check(int x) { return x; }
int aoti_torch_dtype_int8(void) { return 1; }
int some_table[4];
static int local_helper(void) { return 2; }
extern int imported_from_elsewhere(void);
int use(void) { return imported_from_elsewhere() + local_helper(); }
"""


@pytest.fixture
def shared_library(tmp_path):
    gcc = require_tool("gcc")
    (tmp_path / "shims.c").write_text(SO_SOURCE)
    subprocess.run([gcc, "-shared", "-fPIC", "-o", "libaoti_cuda_shims.so", "shims.c"], cwd=tmp_path, check=True)
    return tmp_path / "libaoti_cuda_shims.so"


def test_elf_defined_symbols_only(shared_library):
    names = defined_symbols(shared_library.read_bytes(), "x.so")
    assert {"aoti_torch_check", "aoti_torch_dtype_int8", "some_table", "use"} <= names
    assert "imported_from_elsewhere" not in names and "local_helper" not in names


def test_missing_shim_in_so_is_reported(tmp_path, shared_library, run_cli):
    declared = ShimList("aoti_cuda_shims.dll", (Export("aoti_torch_check"), Export("aoti_torch_dtype_int8"), Export("aoti_torch_warn")))
    (tmp_path / "s.def").write_text(format_def(declared))
    code, _out, err = run_cli("shims", "check", "--list", tmp_path / "s.def", "--so", shared_library)
    assert code == 1
    assert err.splitlines() == [
        f"error: {shared_library}: shim aoti_torch_warn is not defined (declared in {tmp_path / 's.def'}); implement or export it"
    ]


def test_library_must_list_exactly_the_shims(tmp_path, run_cli):
    declared = load_shim_list(SHIPPED_DEF)
    good, bad = tmp_path / "good.lib", tmp_path / "bad.lib"
    good.write_bytes(write_import_library(declared))
    changed = [e for e in declared.exports if e.name != "aoti_torch_warn"] + [Export("aoti_torch_extra"), Export("aoti_torch_check", "data")]
    bad.write_bytes(write_import_library(ShimList(declared.dll, tuple(e for e in changed if e != Export("aoti_torch_check")))))
    assert run_cli("shims", "check", "--list", SHIPPED_DEF, "--lib", good)[0] == 0
    code, _out, err = run_cli("shims", "check", "--list", SHIPPED_DEF, "--lib", bad)
    assert code == 1
    lines = err.splitlines()
    assert any("missing shim aoti_torch_warn" in line for line in lines)
    assert any("extra shim aoti_torch_extra" in line for line in lines)
    assert any("aoti_torch_check: declared code, found data" in line for line in lines)
    assert len(lines) == 3


def test_pe_dll_exports(tmp_path):
    clang, lld_link = require_tool("clang"), require_tool("lld-link")
    (tmp_path / "dll.c").write_text(
        "__declspec(dllexport) int aoti_torch_check(int x) { return x; }\n"
        "__declspec(dllexport) int aoti_torch_warn(void) { return 0; }\n"
        "int _DllMainCRTStartup(void *a, unsigned b, void *c) { return 1; }\n"
    )
    subprocess.run([clang, "--target=x86_64-pc-windows-msvc", "-c", "dll.c", "-o", "dll.obj"], cwd=tmp_path, check=True)
    subprocess.run([lld_link, "/dll", "/nodefaultlib", "/noentry", "/out:shims.dll", "dll.obj"], cwd=tmp_path, check=True)
    assert defined_symbols((tmp_path / "shims.dll").read_bytes(), "shims.dll") == {"aoti_torch_check", "aoti_torch_warn"}


@pytest.mark.parametrize("data", [b"", b"\x7fELF", b"\x7fELF\x02\x01\x01" + bytes(9), b"MZ", b"MZ" + bytes(100), b"garbage"])
def test_hostile_shared_libraries_are_format_errors(data):
    with pytest.raises(FormatError) as info:
        defined_symbols(data, "bad.so")
    assert str(info.value).startswith("bad.so") and "\n" not in str(info.value)
