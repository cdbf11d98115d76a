"""`ptebuild shims ...` through ptebuild.cli.main: exit codes 0/1/2 and one-line messages."""

from __future__ import annotations

import pytest
from shim_tools import SHIPPED_DEF

from ptebuild.shims import Export, ShimList, write_import_library


@pytest.fixture
def files(tmp_path):
    (tmp_path / "good.def").write_text("LIBRARY aoti_cuda_shims.dll\nEXPORTS\n  b\n  a DATA\n  c @4 NONAME\n")
    (tmp_path / "bad.def").write_text("LIBRARY aoti_cuda_shims.dll\nEXPORTS\n  a\n  a CONSTANT\n")
    (tmp_path / "notlib.lib").write_bytes(b"MZ\x90\x00 this is not an archive")
    return tmp_path


def test_build_list_def(files, run_cli):
    out = files / "out.lib"
    assert run_cli("shims", "build", files / "good.def", "-o", out)[0] == 0
    first = out.read_bytes()
    assert run_cli("shims", "build", files / "good.def", "-o", out, "--format", "coff")[0] == 0
    assert out.read_bytes() != first
    code, listing, _ = run_cli("shims", "list", out)
    assert code == 0
    assert listing.splitlines() == ["aoti_cuda_shims.dll (coff layout, 3 exports)", "data   a", "code   b", "code   c  ordinal 4"]
    code, text, _ = run_cli("shims", "def", out)
    assert text == "LIBRARY aoti_cuda_shims.dll\nEXPORTS\n    a DATA\n    b\n    c @4 NONAME\n"


def test_keep_order_and_dll_override(files, run_cli):
    out = files / "o.lib"
    assert run_cli("shims", "build", files / "good.def", "-o", out, "--keep-order", "--dll", "other.dll")[0] == 0
    _, listing, _ = run_cli("shims", "list", out)
    assert listing.splitlines()[0] == "other.dll (gnu layout, 3 exports)"
    assert [line.split()[1] for line in listing.splitlines()[1:]] == ["b", "a", "c"]


CASES = {
    "bad-def": (["shims", "build", "{d}/bad.def", "-o", "{d}/x.lib"], 2,
                "error: {d}/bad.def:4: export 'a' is declared twice, as code and as CONSTANT; keep one declaration (first at line 3)"),
    "missing-file": (["shims", "build", "{d}/nope.def", "-o", "{d}/x.lib"], 2, "error: {d}/nope.def: cannot read: No such file or directory; give a shim list you can read"),
    "not-a-library": (["shims", "list", "{d}/notlib.lib"], 2,
                      "error: {d}/notlib.lib: offset 0: not an archive (no '!<arch>' magic); pass a Windows import library (.lib)"),
    "bad-format": (["shims", "build", "{d}/good.def", "-o", "{d}/x.lib", "--format", "elf"], 2, None),
    "no-subcommand": (["shims"], 2, None),
    "unwritable-output": (["shims", "build", "{d}/good.def", "-o", "{d}/no/such/dir/x.lib"], 2, None),
    "check-ok": (["shims", "check", "--list", str(SHIPPED_DEF)], 0, None),
}


@pytest.mark.parametrize("argv, code, message", CASES.values(), ids=CASES.keys())
def test_exit_codes_and_messages(files, run_cli, argv, code, message):
    got, _out, err = run_cli(*(a.format(d=files) for a in argv))
    assert got == code
    if code:
        assert err.count("\n") == 1 and err.startswith("error: ")
    if message:
        assert err.strip() == message.format(d=files)


def test_every_truncation_through_the_cli(tmp_path, run_cli):
    data = write_import_library(ShimList("s.dll", (Export("f"), Export("g", "data"))))
    cut = tmp_path / "cut.lib"
    for length in range(len(data)):
        cut.write_bytes(data[:length])
        code, out, err = run_cli("shims", "list", cut)
        assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith(f"error: {cut}"), (length, err)
