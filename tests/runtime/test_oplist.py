"""Operator lists for selective builds: ptebuild's pure-Python list against ExecuTorch's own gen_oplist."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from release_build import BUNDLE_PROGRAMS, built_bundles

from ptebuild import cli
from ptebuild.runtime.oplist import OperatorList, merge, program_operators, selected_operators_yaml


@pytest.fixture(scope="session")
def out(tmp_path_factory) -> Path:
    return built_bundles(tmp_path_factory).parent / "out"


def gen_oplist(pte: Path, dest: Path) -> bytes:
    """``python -m executorch.codegen.tools.gen_oplist`` run on ``pte`` by its file name, as ptebuild names it."""
    done = subprocess.run(
        [sys.executable, "-m", "executorch.codegen.tools.gen_oplist", "--model_file_path", pte.name, "--output_path", str(dest)],
        cwd=pte.parent, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return dest.read_bytes()


def test_every_program_lists_what_gen_oplist_writes_byte_for_byte(out, programs, tmp_path):
    """The tiny build's programs (portable with and without a .ptd, XNNPACK) and the runtime tests'
    (XNNPACK with its constants inside, two methods sharing weights)."""
    ptes = [out / f"{name}.pte" for name in BUNDLE_PROGRAMS] + [programs.folder / f"{n}.pte" for n in ("a", "xinline", "multi")]
    for pte in ptes:
        expected = gen_oplist(pte, tmp_path / f"{pte.stem}.yaml")
        assert selected_operators_yaml(program_operators(pte)) == expected, pte.name
    assert b"operators: {}" in (tmp_path / "xinline.yaml").read_bytes()  # a program XNNPACK runs whole needs no kernel


def test_a_bundles_list_is_gen_all_oplists_merge_with_a_stable_order(out, tmp_path):
    """gen_all_oplist names each model by its YAML file and orders them by hash; ptebuild by the
    .pte's name, sorted. Apart from that order, the documents are equal."""
    yamls = []
    for name in BUNDLE_PROGRAMS:
        gen_oplist(out / f"{name}.pte", tmp_path / f"{name}.yaml")
        yamls.append(str(tmp_path / f"{name}.yaml"))
    (tmp_path / "list.txt").write_text("\n".join(yamls) + "\n")
    (tmp_path / "all").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "executorch.codegen.tools.gen_all_oplist", "--model_file_list_path", f"@{tmp_path / 'list.txt'}",
         "--output_dir", str(tmp_path / "all")],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = yaml.safe_load((tmp_path / "all" / "selected_operators.yaml").read_text())
    for op in theirs["operators"].values():
        op["debug_info"] = sorted(f"{Path(p).stem}.pte" for p in op["debug_info"])
    ours = merge(program_operators(out / f"{name}.pte") for name in reversed(BUNDLE_PROGRAMS))
    assert yaml.safe_load(selected_operators_yaml(ours)) == theirs
    assert ours == merge(program_operators(out / f"{name}.pte") for name in BUNDLE_PROGRAMS)  # any order, one list


def test_merge_unites_and_sorts():
    one = OperatorList(("aten::b.out", "aten::a.out"), {"aten::a.out": ("v1/6;0",)}, {"aten::a.out": ("y.pte",), "aten::b.out": ("y.pte",)})
    two = OperatorList(("aten::a.out",), {"aten::a.out": ("v1/4;0", "v1/6;0")}, {"aten::a.out": ("x.pte",)})
    merged = merge([one, two])
    assert merged.operators == ("aten::a.out", "aten::b.out")
    assert dict(merged.kernels) == {"aten::a.out": ("v1/4;0", "v1/6;0")}
    assert dict(merged.debug_info) == {"aten::a.out": ("x.pte", "y.pte"), "aten::b.out": ("y.pte",)}
    assert selected_operators_yaml(merge([])) == (
        b"build_features: []\ncustom_classes: []\net_kernel_metadata: {}\ninclude_all_non_op_selectives: false\n"
        b"include_all_operators: false\nkernel_metadata: {}\noperators: {}\n"
    )


def test_inspect_lists_a_programs_operators(out, capsys):
    assert cli.main(["inspect", str(out / "tiny_portable.pte"), "--oplist"]) == 0
    assert capsys.readouterr().out.encode() == selected_operators_yaml(program_operators(out / "tiny_portable.pte"))
    assert cli.main(["inspect", str(out / "tiny_portable.pte"), "--full"]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("operators for a selective runtime build: 8 (delegated calls not listed)")
    assert lines[start + 1:start + 3] == ["  aten::add.out  v1/6;0,1|6;0,1|6;0,1|6;0,1", "  aten::addmm.out  v1/6;0|6;0,1|6;0,1|6;0,1|6;0,1"]
