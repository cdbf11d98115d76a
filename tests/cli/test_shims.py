"""``ptebuild shims`` (:mod:`ptebuild.cli.shims`): exit codes 0/1/2, one-line messages, atomic writes.

Through :func:`ptebuild.cli.main` as the command line runs it: build, list and def round-trip a
library; each bad input is one ``error:`` line and exit 2; outputs are replaced whole, never left
half-written; merge writes a list or a library as its output's name says. Through the module's
own :func:`~ptebuild.cli.shims.main` (the git merge driver's entry point), in a fresh interpreter:
the same exit codes, and nothing of the builder loaded. The merge and check subcommands' own cases
are ``tests/shims/test_merge.py``'s and ``tests/shims/test_check.py``'s.
"""

from __future__ import annotations

import stat
import subprocess
import sys

import pytest
from shim_tools import SHIPPED_DEF

from ptebuild.shims import Export, ShimList, load_shim_list, read_import_library, write_import_library
from ptebuild.shims.reader import inspect_import_library


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


def test_build_says_what_it_wrote_counting_the_exports_in_the_library(tmp_path, run_cli):
    (tmp_path / "s.def").write_text("LIBRARY s.dll\nEXPORTS\n  b\n  a\n  b\n  hidden PRIVATE\n")
    out = tmp_path / "s.lib"
    code, stdout, err = run_cli("shims", "build", tmp_path / "s.def", "-o", out)
    assert (code, stdout, err) == (0, "", f"wrote {out} (gnu, s.dll, 2 exports)\n")  # sorted, one b, no private
    code, _, err = run_cli("shims", "build", tmp_path / "s.def", "-o", out, "--keep-order", "--format", "coff")
    assert (code, err) == (0, f"wrote {out} (coff, s.dll, 3 exports)\n")  # as llvm-dlltool: duplicates kept
    assert out.read_bytes() == write_import_library(load_shim_list(tmp_path / "s.def"), "coff", keep_order=True)


def test_an_output_is_replaced_whole_readable_by_all(tmp_path, run_cli):
    (tmp_path / "s.def").write_text("LIBRARY s.dll\nEXPORTS\n  f\n")
    out = tmp_path / "s.lib"
    out.write_bytes(b"old")
    out.chmod(0o600)
    assert run_cli("shims", "build", tmp_path / "s.def", "-o", out)[0] == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.def", "s.lib"]  # no temporary file left


def test_an_output_that_cannot_be_written_leaves_nothing_behind(tmp_path, run_cli):
    (tmp_path / "s.def").write_text("LIBRARY s.dll\nEXPORTS\n  f\n")
    folder = tmp_path / "taken"
    folder.mkdir()
    code, _, err = run_cli("shims", "build", tmp_path / "s.def", "-o", folder)
    assert code == 2
    assert err == f"error: {folder}: cannot write: Is a directory; give a path in a folder you can write to\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.def", "taken"] and not any(folder.iterdir())


def test_list_names_a_hint_and_an_ordinal(tmp_path, run_cli):
    (tmp_path / "s.def").write_text("LIBRARY s.dll\nEXPORTS\n  hinted @12\n  by_ordinal @7 NONAME\n  table DATA\n  k CONSTANT\n")
    assert run_cli("shims", "build", tmp_path / "s.def", "-o", tmp_path / "s.lib")[0] == 0
    code, listing, _ = run_cli("shims", "list", tmp_path / "s.lib")
    assert code == 0
    assert listing.splitlines() == ["s.dll (gnu layout, 4 exports)", "code   by_ordinal  ordinal 7", "code   hinted  hint 12",
                                    "const  k", "data   table"]


def test_def_writes_a_file_that_builds_the_same_library(tmp_path, run_cli):
    library = tmp_path / "shipped.lib"
    library.write_bytes(write_import_library(load_shim_list(SHIPPED_DEF), "coff"))
    code, stdout, _ = run_cli("shims", "def", library, "-o", tmp_path / "again.def")
    assert (code, stdout) == (0, "")
    assert write_import_library(load_shim_list(tmp_path / "again.def"), "coff") == library.read_bytes()


BASE = ShimList("s.dll", (Export("keep"), Export("gone")))
OURS = ShimList("s.dll", (Export("keep"), Export("gone"), Export("ours")))
THEIRS = ShimList("s.dll", (Export("keep"), Export("theirs", "data")))


@pytest.mark.parametrize(("output", "layout"), [("m.def", None), ("m.toml", None), ("m.lib", "coff"), ("m.bin", "coff")])
def test_merge_writes_what_its_outputs_name_says(tmp_path, run_cli, output, layout):
    """A list for .def and .toml; a library for anything else, in OURS's layout."""
    for name, value in {"base": BASE, "ours": OURS, "theirs": THEIRS}.items():
        (tmp_path / f"{name}.lib").write_bytes(write_import_library(value, "coff"))
    code, _, err = run_cli("shims", "merge", *(tmp_path / f"{n}.lib" for n in ("base", "ours", "theirs")), "-o", tmp_path / output)
    assert (code, err) == (0, f"merged 3 exports of s.dll into {tmp_path / output}\n")
    merged = ShimList("s.dll", (Export("keep"), Export("ours"), Export("theirs", "data")))
    if layout is None:
        assert load_shim_list(tmp_path / output) == merged
    else:
        library = inspect_import_library((tmp_path / output).read_bytes(), output)
        assert library.layout == layout and library.shims == merged


def test_merge_format_overrides_ours(tmp_path, run_cli):
    for name, value in {"base": BASE, "ours": OURS, "theirs": THEIRS}.items():
        (tmp_path / f"{name}.toml").write_text(__import__("ptebuild.shims.deffile").shims.deffile.format_toml(value))
    paths = [tmp_path / f"{n}.toml" for n in ("base", "ours", "theirs")]
    assert run_cli("shims", "merge", *paths, "-o", tmp_path / "text.lib")[0] == 0  # a list has no layout: gnu
    assert inspect_import_library((tmp_path / "text.lib").read_bytes(), "x").layout == "gnu"
    assert run_cli("shims", "merge", *paths, "-o", tmp_path / "asked.lib", "--format", "coff")[0] == 0
    assert inspect_import_library((tmp_path / "asked.lib").read_bytes(), "x").layout == "coff"


ALONE = """
import json, subprocess, sys
from ptebuild.cli.shims import main
codes = [main(argv) for argv in json.loads(sys.argv[1])]
heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'executorch', 'pydantic')
               or m.startswith(('ptebuild.builder', 'ptebuild.api', 'ptebuild.store', 'ptebuild.manifest', 'ptebuild.backends')))
print(json.dumps({"codes": codes, "heavy": heavy}))
"""


def test_the_merge_drivers_entry_point_alone(tmp_path):
    """``python -m ptebuild.cli.shims``: the shims commands with ptebuild's exit codes, and nothing
    of the builder loaded (git runs it for every conflicting .lib)."""
    import json

    for name, value in {"base": BASE, "ours": OURS, "theirs": THEIRS}.items():
        (tmp_path / f"{name}.lib").write_bytes(write_import_library(value))
    (tmp_path / "ours.def").write_text("LIBRARY s.dll\nEXPORTS\n  keep DATA\n")
    (tmp_path / "theirs.def").write_text("LIBRARY s.dll\nEXPORTS\n  keep CONSTANT\n")
    lib = str(tmp_path / "{}.lib")
    runs = [
        ["merge", lib.format("base"), lib.format("ours"), lib.format("theirs"), "-o", str(tmp_path / "merged.lib")],
        ["merge", lib.format("base"), str(tmp_path / "ours.def"), str(tmp_path / "theirs.def"), "-o", str(tmp_path / "no.lib")],
        ["list", str(tmp_path / "missing.lib")],
        ["bogus"],
        ["--help"],
    ]
    done = subprocess.run([sys.executable, "-c", ALONE, json.dumps(runs)], capture_output=True, text=True, check=True)
    report = json.loads(done.stdout.splitlines()[-1])
    assert report == {"codes": [0, 1, 2, 2, 0], "heavy": []}
    assert read_import_library((tmp_path / "merged.lib").read_bytes(), "x").names() == {"keep", "ours", "theirs"}
    assert not (tmp_path / "no.lib").exists()
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert errors[0] == (f"error: {tmp_path / 'ours.def'}: merge conflict: export keep: ours DATA, theirs CONSTANT; "
                         "edit the shim list to say which")
    assert errors[1] == f"error: {tmp_path / 'missing.lib'}: cannot read: No such file or directory; give the path of a .lib, .def or shim list"
    assert errors[2].startswith("error: ptebuild shims: argument SUBCOMMAND: invalid choice: 'bogus'")


def test_python_dash_m_runs_it(tmp_path):
    (tmp_path / "s.def").write_text("LIBRARY s.dll\nEXPORTS\n  f\n")
    done = subprocess.run([sys.executable, "-m", "ptebuild.cli.shims", "build", str(tmp_path / "s.def"), "-o", str(tmp_path / "s.lib")],
                          capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, f"wrote {tmp_path / 's.lib'} (gnu, s.dll, 1 exports)\n")
    assert read_import_library((tmp_path / "s.lib").read_bytes(), "x").names() == {"f"}
