"""Three-way merge of export sets, through the library, the CLI and a real git merge."""

from __future__ import annotations

import subprocess

from ptebuild.shims import Export, ShimList, read_import_library, write_import_library
from ptebuild.shims.gitdriver import install_merge_driver
from ptebuild.shims.merge import merge_shim_lists


def shims(*exports: Export, dll: str = "aoti_cuda_shims.dll") -> ShimList:
    return ShimList(dll, exports)


BASE = shims(Export("keep"), Export("drop_ours"), Export("drop_theirs"))


def test_additions_kept_and_one_sided_removals_removed():
    ours = shims(Export("keep"), Export("drop_theirs"), Export("added_ours"))
    theirs = shims(Export("keep"), Export("drop_ours"), Export("added_theirs"), Export("added_both"))
    ours = shims(*ours.exports, Export("added_both"))
    result = merge_shim_lists(BASE, ours, theirs)
    assert result.conflicts == ()
    assert [e.name for e in result.shims.exports] == ["added_both", "added_ours", "added_theirs", "keep"]


def test_different_types_on_two_sides_conflict():
    ours = shims(*BASE.exports, Export("x"))
    theirs = shims(*BASE.exports, Export("x", "data"))
    result = merge_shim_lists(BASE, ours, theirs)
    assert result.conflicts == ("export x: ours code, theirs DATA; edit the shim list to say which",)


def test_change_against_removal_conflicts():
    result = merge_shim_lists(BASE, shims(Export("keep", "const")), shims(Export("drop_ours"), Export("drop_theirs")))
    assert result.conflicts == ("export keep: ours CONSTANT, theirs removed; edit the shim list to say which",)


def test_cli_merge_of_libraries(tmp_path, run_cli):
    paths = {}
    for name, value in {"base": BASE, "ours": shims(*BASE.exports, Export("a")), "theirs": shims(*BASE.exports, Export("b"))}.items():
        paths[name] = tmp_path / f"{name}.lib"
        paths[name].write_bytes(write_import_library(value, "coff"))
    code, _out, err = run_cli("shims", "merge", paths["base"], paths["ours"], paths["theirs"], "-o", tmp_path / "out.lib")
    assert code == 0, err
    merged = read_import_library((tmp_path / "out.lib").read_bytes(), "out.lib")
    assert merged.names() == {"keep", "drop_ours", "drop_theirs", "a", "b"}
    assert (tmp_path / "out.lib").read_bytes() == write_import_library(merged, "coff")  # OURS was coff


def test_cli_merge_conflict_exits_1(tmp_path, run_cli):
    for name, value in {"b": BASE, "o": shims(Export("x")), "t": shims(Export("x", "data"))}.items():
        (tmp_path / f"{name}.def").write_text(__import__("ptebuild.shims").shims.format_def(value))
    code, _out, err = run_cli("shims", "merge", *(tmp_path / f"{n}.def" for n in "bot"), "-o", tmp_path / "m.def")
    assert code == 1
    assert err.strip().splitlines() == [f"error: {tmp_path / 'o.def'}: merge conflict: export x: ours code, theirs DATA; edit the shim list to say which"]


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def test_git_merge_of_two_branches_that_each_add_a_shim(tmp_path, run_cli):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    code, _out, err = run_cli("shims", "install-merge-driver", "--repo", repo)
    assert code == 0, err
    assert "*.lib -text merge=ptebuild-shims" in (repo / ".gitattributes").read_text()
    lib = repo / "aoti_cuda_shims.lib"
    lib.write_bytes(write_import_library(BASE))
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    git(repo, "checkout", "-qb", "feature")
    lib.write_bytes(write_import_library(shims(*BASE.exports, Export("aoti_torch_as_strided"))))
    git(repo, "commit", "-qam", "add as_strided")
    git(repo, "checkout", "-q", "main")
    lib.write_bytes(write_import_library(shims(*BASE.exports, Export("aoti_torch_get_size"))))
    git(repo, "commit", "-qam", "add get_size")
    git(repo, "merge", "-q", "--no-edit", "feature")
    merged = read_import_library(lib.read_bytes(), "merged.lib")
    assert merged.names() == BASE.names() | {"aoti_torch_as_strided", "aoti_torch_get_size"}
    assert git(repo, "status", "--porcelain") == ""


def test_install_merge_driver_outside_a_repository(tmp_path, run_cli):
    code, _out, err = run_cli("shims", "install-merge-driver", "--repo", tmp_path)
    assert code == 2 and err.startswith(f"error: {tmp_path}: git rev-parse") and err.count("\n") == 1


def test_install_is_idempotent(tmp_path):
    git(tmp_path, "init", "-q")
    install_merge_driver(tmp_path)
    install_merge_driver(tmp_path)
    assert (tmp_path / ".gitattributes").read_text().count("merge=ptebuild-shims") == 1
