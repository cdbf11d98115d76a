"""The .def and TOML shim-list readers and writers, and the shipped CUDA list."""

from __future__ import annotations

import re

import pytest
from shim_tools import SHIPPED_DEF

from ptebuild.errors import UsageError
from ptebuild.shims import Export, ShimList, format_toml, load_shim_list, parse_def, parse_toml


def test_def_syntax():
    text = (
        "; comment\nLIBRARY foo BASE=0x10000000\nHEAPSIZE 4096,1024\nVERSION 1.2\nEXPORTS\n"
        "  a ; trailing\n  b=internal_b @3\n  c @ 4 NONAME DATA\n  d CONSTANT PRIVATE\n  \"EXPORTS\"\n"
    )
    assert parse_def(text, "x.def") == ShimList(
        "foo.dll",
        (Export("a"), Export("b", ordinal=3), Export("c", "data", 4, True), Export("d", "const", private=True), Export("EXPORTS")),
    )


BAD_DEFS = {
    "unknown-directive": ("LIBRARY x.dll\nIMPORTS\n", "x.def:2: unexpected 'IMPORTS'; expected LIBRARY, NAME, EXPORTS"),
    "noname-without-ordinal": ("LIBRARY x.dll\nEXPORTS\n  f NONAME\n", "x.def:3: export 'f': NONAME must follow an @ordinal"),
    "bad-ordinal": ("LIBRARY x.dll\nEXPORTS\n  f @x1\n", "x.def:3: export 'f': expected a decimal ordinal after '@'"),
    "ordinal-too-big": ("LIBRARY x.dll\nEXPORTS\n\n  f @70000\n", "x.def:4: export 'f': ordinal 70000 is outside 0..65535"),
    "zero-noname": ("LIBRARY x.dll\nEXPORTS\n  f @0 NONAME\n", "x.def:3: export 'f': NONAME needs a non-zero @ordinal"),
    "weak-alias": ("LIBRARY x.dll\nEXPORTS\n  f == g\n", "x.def:3: export 'f': weak aliases (==) are not supported"),
    "comma": ("LIBRARY x.dll\nEXPORTS\n  f, g\n", "x.def:3: unexpected ','"),
    "unterminated-quote": ('LIBRARY x.dll\nEXPORTS\n  "f\n', "x.def:3: unterminated quoted name"),
    "space-in-name": ('LIBRARY x.dll\nEXPORTS\n  "a b"\n', "x.def:3: name 'a b' contains the character ' '; a linker cannot import it"),
    "control-char": ("LIBRARY x.dll\nEXPORTS\n  a\x01b\n", "x.def:3: name 'a\\x01b' contains the character '\\x01'"),
    "type-conflict": ("LIBRARY x.dll\nEXPORTS\n  f\n  g\n  f DATA\n", "x.def:5: export 'f' is declared twice, as code and as DATA; keep one declaration (first at line 3)"),
    "bad-dll": ('LIBRARY "a/b.dll"\nEXPORTS\n  f\n', "x.def: DLL name 'a/b.dll' contains the character '/'"),
    "base-without-equal": ("LIBRARY x.dll BASE 5\n", "x.def:1: expected '=' after BASE"),
}


@pytest.mark.parametrize("text, message", BAD_DEFS.values(), ids=BAD_DEFS.keys())
def test_bad_def_is_one_line_with_its_line_number(text, message):
    with pytest.raises(UsageError) as info:
        parse_def(text, "x.def")
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_toml_form_round_trips():
    shims = ShimList("aoti_cuda_shims.dll", (Export("a"), Export("t", "data"), Export("n", "const", 9, True, True)))
    text = format_toml(shims)
    assert '    "a",\n' in text
    assert parse_toml(text, "x.toml") == shims


BAD_TOML = {
    "syntax": ("dll = \n", "x.toml: not valid TOML"),
    "no-dll": ('exports = ["a"]\n', "x.toml: dll: missing or not a string"),
    "unknown-key": ('dll = "a.dll"\nexport = []\n', "x.toml: unknown key 'export'"),
    "bad-type": ('dll = "a.dll"\nexports = [{ name = "a", type = "func" }]\n', "x.toml: exports[0]: unknown type 'func'; use one of code, data, const"),
    "bad-entry": ('dll = "a.dll"\nexports = [1]\n', "x.toml: exports[0]: neither a name nor a table; write a name or a table like"),
    "conflict": ('dll = "a.dll"\nexports = ["a", { name = "a", type = "data" }]\n', "x.toml: exports[1]: export 'a' is declared twice"),
    "bad-name": ('dll = "a.dll"\nexports = ["a b"]\n', "x.toml: exports[0]: name 'a b' contains"),
}


@pytest.mark.parametrize("text, message", BAD_TOML.values(), ids=BAD_TOML.keys())
def test_bad_toml(text, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        parse_toml(text, "x.toml")


def test_load_by_extension(tmp_path):
    (tmp_path / "s.toml").write_text('dll = "a.dll"\nexports = ["f"]\n')
    (tmp_path / "s.def").write_text("LIBRARY a.dll\nEXPORTS\n  f\n")
    assert load_shim_list(tmp_path / "s.toml") == load_shim_list(tmp_path / "s.def")
    (tmp_path / "bin.def").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UsageError, match="bin.def: not UTF-8 text"):
        load_shim_list(tmp_path / "bin.def")


def test_shipped_cuda_list_is_the_union():
    shims = load_shim_list(SHIPPED_DEF)
    assert shims.dll == "aoti_cuda_shims.dll"
    assert len(shims.exports) == 56 and shims == shims.canonical()
    assert all(e == Export(e.name) for e in shims.exports)
    for name in ("aoti_torch_check", "aoti_torch_cuda_int4_plain_mm", "aoti_torch_dtype_uint8", "aoti_torch_as_strided",
                 "aoti_torch_cuda_index_Tensor", "aoti_torch_dtype_element_size", "aoti_torch_warn"):
        assert name in shims.names()


def test_parse_def_needs_a_dll_name():
    with pytest.raises(UsageError, match=r"x.def: no DLL name; add 'LIBRARY aoti_cuda_shims.dll' or pass --dll"):
        parse_def("EXPORTS\n  f\n", "x.def")
