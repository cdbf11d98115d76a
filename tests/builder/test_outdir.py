"""The output folder (:mod:`ptebuild.builder.outdir`): it refuses to write over another manifest's
file or a name that differs only in case, stages per process and publishes each file whole (the
``.ptd`` before its ``.pte``), cleans up after itself and after dead builders but never a live
one's staging, and keeps a build record entry per target that names the manifest the way a moved
checkout still matches.

Real output folders of the tiny project's plan, files written here (no lowering: the builds of
``tests/test_build.py`` and ``tests/builder/test_publish.py`` go through the whole loop).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from project_copy import copy_project

from ptebuild.builder.outdir import STAGING_DIR, OutputFolder, bpte_tolerance, manifest_id
from ptebuild.deps import Dependencies
from ptebuild.errors import DataNameError
from ptebuild.figures import OutputFigures
from ptebuild.hashing import hash_file
from ptebuild.manifest import load_manifest
from ptebuild.plan import BuildPlan
from ptebuild.results import ActionResult, OutputFile
from ptebuild.runtime.record import RECORD_NAME, RecordEntry, bundled_io_entry, read_build_record, update_record


@pytest.fixture
def plan(tmp_path) -> BuildPlan:
    """The tiny project's plan (a copy in ``tmp_path/project``: writes ``tiny_portable.pte``,
    ``tiny_portable_weights.ptd``, ``tiny_xnnpack.pte`` and ``tiny_xnnpack_weights.ptd``)."""
    return load_manifest(str(copy_project(tmp_path / "project")))


@pytest.fixture
def folder(plan, tmp_path) -> OutputFolder:
    """The plan's output folder, made and empty."""
    out = tmp_path / "project" / "out"
    out.mkdir()
    return OutputFolder(plan, out, hash_file)


def put(path: Path, data: bytes) -> OutputFile:
    """Write ``data`` at ``path``; the output it is."""
    path.write_bytes(data)
    return OutputFile(path.name, *hash_file(path))


# -- the manifest's name in the record ----------------------------------------------------------


def test_the_manifest_is_named_relative_to_the_output_folder(plan, tmp_path):
    assert manifest_id(plan, tmp_path / "project" / "out") == "../tiny.toml"
    assert manifest_id(plan, tmp_path / "elsewhere" / "out") == "../../project/tiny.toml"


def test_a_checkout_moved_as_a_whole_keeps_its_manifests_name(tmp_path):
    before = load_manifest(str(copy_project(tmp_path / "a" / "project")))
    after = load_manifest(str(copy_project(tmp_path / "moved" / "deeper" / "project")))
    assert manifest_id(before, tmp_path / "a" / "project" / "out") == manifest_id(
        after, tmp_path / "moved" / "deeper" / "project" / "out")


# -- who owns the files ----------------------------------------------------------------------------


def test_an_output_folder_not_made_yet_or_empty_is_anyones(plan, tmp_path):
    OutputFolder(plan, tmp_path / "not-yet", hash_file).check_ownership()
    (tmp_path / "empty").mkdir()
    OutputFolder(plan, tmp_path / "empty", hash_file).check_ownership()


def test_a_name_that_differs_from_a_file_there_only_in_case_is_refused(folder, plan):
    (folder.path / "TINY_PORTABLE_WEIGHTS.ptd").write_bytes(b"someone else's")
    with pytest.raises(DataNameError) as info:
        folder.check_ownership()
    assert str(info.value) == (
        f"{plan.manifest}: program 'tiny_portable' writes 'tiny_portable_weights.ptd', but {folder.path} already has "
        "'TINY_PORTABLE_WEIGHTS.ptd', one file on macOS and Windows; choose names that differ in more than case, or "
        "remove 'TINY_PORTABLE_WEIGHTS.ptd'")


def record_owner(out: Path, manifest: str, target: str = "tiny_portable", name: str = "tiny_portable_weights.ptd") -> None:
    """A record in ``out`` saying that ``target`` of ``manifest`` built the file ``name`` there."""
    output = put(out / name, b"built before")
    update_record(out, manifest, {target: RecordEntry(kind="program", manifest=manifest, key="k" * 64,
                                                      outputs=((output.name, output.sha256, output.size),))})


def test_a_file_another_manifest_built_is_refused(folder, plan):
    record_owner(folder.path, "../../first/tiny.toml")
    with pytest.raises(DataNameError) as info:
        folder.check_ownership()
    assert str(info.value) == (
        f"{plan.manifest}: program 'tiny_portable' writes 'tiny_portable_weights.ptd', but {folder.path} has the "
        "'tiny_portable_weights.ptd' that 'tiny_portable' of ../../first/tiny.toml built (per ptebuild.json); give "
        "one of them another name or output folder, or delete 'tiny_portable_weights.ptd'")


def test_a_file_this_manifest_built_is_its_own_under_any_program_name(folder):
    record_owner(folder.path, folder.manifest_id, target="renamed_before")
    folder.check_ownership()


def test_an_unreadable_record_claims_nothing(folder):
    (folder.path / "tiny_portable_weights.ptd").write_bytes(b"built before")
    (folder.path / RECORD_NAME).write_text("{not a record")
    folder.check_ownership()


# -- staging and publishing -----------------------------------------------------------------------


def test_each_process_stages_in_a_folder_of_its_own(folder):
    root = folder.staging_root()
    assert root.parent == folder.path / STAGING_DIR and root.name.startswith(f"{os.getpid()}-")
    assert folder.staging_root() == root  # made once
    first, second = folder.stage("tiny_portable"), folder.stage("tiny_portable")
    assert first != second and first.parent == root == second.parent
    assert first.name.startswith("tiny_portable.") and list(first.iterdir()) == []


def test_published_files_replace_the_old_ones_whole_and_leave_staging(folder):
    old = {name: put(folder.path / name, b"old " + name.encode()) for name in ("tiny_portable.pte", "tiny_portable_weights.ptd")}
    staged = folder.stage("tiny_portable")
    new = {name: put(staged / name, b"new " + name.encode()) for name in old}
    assert folder.missing(tuple(new.values())) == list(new.values())
    folder.publish({name: staged / name for name in new})
    assert folder.missing(tuple(new.values())) == []
    assert folder.missing(tuple(old.values())) == list(old.values())
    assert list(staged.iterdir()) == []  # renamed, not copied


def test_the_weights_are_published_before_their_program(folder):
    """Until the new ``.pte`` is in place the old one stays, and the SHA-256 keys make it refuse
    the new ``.ptd``: the other order would leave a new program beside old weights."""
    put(folder.path / "tiny_portable.pte", b"old program")
    staged = folder.stage("tiny_portable")
    put(staged / "tiny_portable_weights.ptd", b"new weights")  # the .pte's rename will fail: it is not there
    with pytest.raises(FileNotFoundError):
        folder.publish({"tiny_portable.pte": staged / "tiny_portable.pte", "tiny_portable_weights.ptd": staged / "tiny_portable_weights.ptd"})
    assert (folder.path / "tiny_portable_weights.ptd").read_bytes() == b"new weights"
    assert (folder.path / "tiny_portable.pte").read_bytes() == b"old program"


def test_in_place_means_these_very_bytes(folder):
    output = put(folder.path / "tiny_portable.pte", b"program")
    assert folder.in_place(output)
    (folder.path / "tiny_portable.pte").write_bytes(b"PROGRAM")  # same size, other bytes
    assert not folder.in_place(output)
    (folder.path / "tiny_portable.pte").unlink()
    assert not folder.in_place(output)


def test_clean_removes_its_own_staging_and_dead_builders_but_not_a_live_ones(folder):
    own = folder.stage("tiny_portable")
    (own / "tiny_portable.pte").write_bytes(b"half written")
    root = folder.path / STAGING_DIR
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    (root / f"{dead.pid}-abc").mkdir()
    (root / f"{dead.pid}-abc" / "x.pte").write_bytes(b"a killed build's")
    (root / "stray").mkdir()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (root / f"{live.pid}-def").mkdir()
        folder.clean()
        assert [p.name for p in root.iterdir()] == [f"{live.pid}-def"]
    finally:
        live.kill()
        live.wait()
    folder.clean()  # its builder is gone now, and with it the staging root
    assert not root.exists()
    assert sorted(p.name for p in folder.path.iterdir()) == []


def test_an_empty_output_folder_is_removed_and_a_used_one_kept(folder):
    (folder.path / ".ptebuild").mkdir()
    folder.remove_if_empty()
    assert not folder.path.exists()
    folder.remove_if_empty()  # gone already: nothing to do
    folder.path.mkdir()
    (folder.path / ".ptebuild").mkdir()
    (folder.path / ".ptebuild" / "logs").mkdir()
    folder.remove_if_empty()
    assert (folder.path / ".ptebuild" / "logs").is_dir()


# -- the build record -----------------------------------------------------------------------------


def test_nothing_recorded_writes_no_record(folder):
    folder.write_record()
    assert not (folder.path / RECORD_NAME).exists()


def test_a_shim_librarys_entry_names_its_files_manifest_and_inputs(folder, plan):
    files = (put(folder.path / "lib.a", b"archive"), put(folder.path / "lib.def", b"EXPORTS\n"))
    folder.record("shims", ActionResult(key="s" * 64, target="shims", kind="shims", outputs=files, inputs={"manifest:x": "1"}))
    folder.write_record()
    document = json.loads((folder.path / RECORD_NAME).read_text())
    assert document["manifest"] == plan.manifest
    assert document["targets"] == {"shims": {
        "kind": "shims", "manifest": "../tiny.toml", "key": "s" * 64, "inputs": {"manifest:x": "1"}, "deps": Dependencies().to_json(),
        "outputs": {o.name: {"sha256": o.sha256, "bytes": o.size} for o in files}}}


FIGURES = (
    OutputFigures("forward", {"batch": 1}, 0, 2e-6, 0.999999, dtype="float32", atol=1e-4, rtol=1e-5, min_cosine=0.99999),
    OutputFigures("forward", {"batch": 4}, 0, 3e-6, 0.999998, dtype="float32", atol=1e-4, rtol=1e-5, min_cosine=0.99999),
)


def test_a_programs_entry_keeps_its_plan_its_check_and_the_files_as_published(folder, plan):
    program = plan.programs[0]
    files = (put(folder.path / "tiny_portable.pte", b"not a program ExecuTorch reads"),
             put(folder.path / "tiny_portable.bpte", b"bundled"))
    result = ActionResult(key="p" * 64, target=program.name, kind="program", outputs=files, backend="portable",
                          figures=FIGURES, check="executorch-runtime")
    shared = (*files, put(folder.path / "shared.ptd", b"weights of two programs"))
    folder.record(program.name, result, program, outputs=shared, shared_data="shared")
    folder.write_record()
    entry = read_build_record(folder.path).entries()[program.name]
    assert entry.outputs == tuple(sorted((o.name, o.sha256, o.size) for o in shared))  # as published, not the action's
    assert (entry.kind, entry.manifest, entry.key, entry.backend, entry.check) == (
        "program", "../tiny.toml", "p" * 64, "portable", "executorch-runtime")
    assert (entry.data_name, entry.methods, entry.shared_data) == ("tiny_portable_weights", ("forward", "score"), "shared")
    assert entry.checked is not None and entry.checked["verdict"] == "passed" and entry.checked["max_abs_error"] == 3e-6
    assert entry.bundled_io == bundled_io_entry(program.atol, 3e-6)
    assert entry.runtime is None and entry.weights_in_pte == ()  # a .pte it cannot read: verify says why


def test_a_program_without_a_bundle_or_error_figures_records_neither(folder, plan):
    program = plan.programs[0]
    files = (put(folder.path / "tiny_portable.pte", b"program"),)
    folder.record(program.name, ActionResult(key="p" * 64, target=program.name, kind="program", outputs=files))
    folder.write_record()
    entry = read_build_record(folder.path).entries()[program.name]
    assert entry.bundled_io is None and entry.checked is None
    assert entry.data_name is None and entry.methods == ()  # no plan given: nothing of it


def test_a_bpte_is_verified_within_twice_the_checks_largest_error(plan):
    program = plan.programs[0]
    result = ActionResult(key="p" * 64, target=program.name, kind="program", outputs=(), figures=FIGURES)
    assert bpte_tolerance(program, result) == {"atol": 2 * 3e-6 + 1e-5, "rtol": 0.0, "max_error": 3e-6, "margin": 2.0}
    unchecked = ActionResult(key="p" * 64, target=program.name, kind="program", outputs=())
    assert bpte_tolerance(program, unchecked) == {"atol": program.atol, "rtol": 0.0}
