"""`ptebuild pack` on real builds of the tiny project: reproducible bytes, sha256sum -c, refusals, --from-cache, declared bundles."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from release_build import BUNDLE_PROGRAMS, NOTICE, PROGRAMS, built_bundles, built_tiny, bundle_cache, cache_dir, copy_project

from ptebuild import cli
from ptebuild.release.lock import LockEntry, loads_lock, lock_entries_from_record, read_lock, write_lock
from ptebuild.release.pack import PackError, pack, pack_from_cache
from ptebuild.results import OutputFile
from ptebuild.runtime.oplist import merge, program_operators, selected_operators_yaml
from ptebuild.runtime.record import read_build_record

ROOT = Path(__file__).resolve().parents[2]

# Copies the project (with its out/ folder) under the umask given, then packs it.
PACK_SCRIPT = """
import os, shutil, sys
src, dest, archive, umask = sys.argv[1:5]
os.umask(int(umask, 8))
shutil.copytree(src, dest, copy_function=shutil.copyfile)
from ptebuild import cli
sys.exit(cli.main(["pack", os.path.join(dest, "tiny.toml"), "-o", archive]))
"""


@pytest.fixture(scope="session")
def manifest(tmp_path_factory) -> Path:
    return built_tiny(tmp_path_factory)


@pytest.fixture
def project(manifest, tmp_path) -> Path:
    """A private copy of the built project (manifest, models, out/): returns its manifest."""
    return Path(shutil.copytree(manifest.parent, tmp_path / "project")) / "tiny.toml"


@pytest.fixture
def run(capsys):
    def call(*argv) -> tuple[int, str, str]:
        code = cli.main([*map(str, argv)])
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        return code, out, err

    return call


def pack_elsewhere(manifest: Path, where: Path, archive_name: str, umask: str) -> bytes:
    where.mkdir(parents=True)
    (where / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(where / "tmp"), "PYTHONPATH": str(ROOT)}
    env.pop("SOURCE_DATE_EPOCH", None)
    archive = where / "dist" / archive_name
    archive.parent.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", PACK_SCRIPT, str(manifest.parent), str(where / "project"), str(archive), umask],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return archive.read_bytes()


@pytest.mark.parametrize("name", ["tiny-1.0.tar.gz", "tiny-1.0.zip"])
def test_two_packs_from_two_folders_umasks_and_tmpdirs_are_byte_identical(manifest, tmp_path, name):
    one = pack_elsewhere(manifest, tmp_path / "alice", name, "077")
    two = pack_elsewhere(manifest, tmp_path / "bob" / "deeper", name, "002")
    assert one == two


def test_sha256sum_accepts_the_extracted_sums(project, tmp_path, run):
    archive = tmp_path / "tiny-1.0.tar.gz"
    code, out, _ = run("pack", project, "-o", archive)
    assert code == 0 and f"-> {archive}" in out.splitlines()[-1]
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    folder = tmp_path / "x" / "tiny-1.0"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["SHA256SUMS", "provenance.intoto.json", "ptebuild.json", "selected_operators.yaml", "tiny.toml"]
        + [f"{p}.pte" for p in PROGRAMS] + [f"{p}_weights.ptd" for p in PROGRAMS]
    )
    done = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=folder, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": OK\n") == 8
    assert (folder / "tiny.toml").read_bytes() == project.read_bytes()
    record = json.loads((folder / "ptebuild.json").read_text())
    assert record["manifest"] == "tiny.toml" and sorted(record["targets"]) == list(PROGRAMS)
    assert str(tmp_path) not in (folder / "ptebuild.json").read_text()
    code, out, _ = run("verify", archive)
    assert code == 0, out
    assert out.splitlines()[-1] == f"2 targets: all ok (4 files, 14 keys checked, blobs rehashed) -> {archive}"


# Slow: a second clean build (8 s); tests/release/test_diff.py's two clean builds and the bundles' byte-identity test share the session's builds.
@pytest.mark.slow
def test_a_second_clean_build_in_another_folder_packs_to_the_same_bytes(manifest, tmp_path, run):
    """Two clean builds (no shared cache), two folders: one archive."""
    first = tmp_path / "first" / "tiny.tar.gz"
    first.parent.mkdir()
    assert run("pack", manifest, "-o", first)[0] == 0
    other = copy_project(tmp_path / "elsewhere" / "project")
    code, _, err = run("build", other, "--cache", tmp_path / "fresh-cache")
    assert code == 0, err
    second = tmp_path / "second" / "tiny.tar.gz"
    second.parent.mkdir()
    assert run("pack", other, "-o", second)[0] == 0
    assert first.read_bytes() == second.read_bytes()


def test_a_damaged_output_is_not_packed(project, tmp_path, run):
    ptd = project.parent / "out" / "tiny_portable_weights.ptd"
    data = bytearray(ptd.read_bytes())
    data[-1] ^= 0xFF
    ptd.write_bytes(data)
    archive = tmp_path / "dist" / "t.tar.gz"
    archive.parent.mkdir()
    code, out, err = run("pack", project, "-o", archive)
    assert code == 1 and out == ""
    assert err.count("\n") == 1
    assert "tiny_portable fails verification: tiny_portable_weights.ptd: sha256 mismatch" in err
    assert err.rstrip().endswith(f"nothing packed; rebuild it with `ptebuild build {project}`")
    assert os.listdir(archive.parent) == []


def test_an_unbuilt_program_is_named(project, tmp_path, run):
    record_path = project.parent / "out" / "ptebuild.json"
    record = json.loads(record_path.read_text())
    del record["targets"]["tiny_xnnpack"]
    record_path.write_text(json.dumps(record))
    code, _, err = run("pack", project, "-o", tmp_path / "t.zip")
    assert code == 1
    assert f"not built: tiny_xnnpack; nothing packed; run `ptebuild build {project}`" in err
    assert not (tmp_path / "t.zip").exists()


def test_a_lock_beside_the_manifest_is_packed_and_checked(project, tmp_path, run):
    record = read_build_record(project.parent / "out")
    entries = lock_entries_from_record(record.targets)
    write_lock(project.parent / "ptebuild.lock", entries, manifest="tiny.toml")
    assert run("pack", project, "-o", tmp_path / "ok.tar.gz")[0] == 0
    with tarfile.open(tmp_path / "ok.tar.gz") as tar:
        assert tar.extractfile("ok/ptebuild.lock").read() == (project.parent / "ptebuild.lock").read_bytes()
    pte = entries["tiny_portable"].outputs[0]
    stale = LockEntry(**{**entries["tiny_portable"].__dict__, "outputs": (OutputFile(pte.name, "0" * 64, pte.size), *entries["tiny_portable"].outputs[1:])})
    write_lock(project.parent / "ptebuild.lock", {**entries, "tiny_portable": stale}, manifest="tiny.toml")
    code, _, err = run("pack", project, "-o", tmp_path / "stale.tar.gz")
    assert code == 1 and "program tiny_portable: output tiny_portable.pte differs from the lock" in err
    assert not (tmp_path / "stale.tar.gz").exists()


def test_from_cache_packs_the_same_bytes_as_from_the_folder(project, tmp_path_factory, tmp_path):
    record = read_build_record(project.parent / "out")
    lock = write_lock(project.parent / "ptebuild.lock", lock_entries_from_record(record.targets), manifest="tiny.toml")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    folder = pack(None, project, lock.path, tmp_path / "a" / "tiny.zip")
    shutil.rmtree(project.parent / "out")  # nothing built here: the cache alone
    cached = pack_from_cache(lock.path, cache_dir(tmp_path_factory), tmp_path / "b" / "tiny.zip")
    assert cached.files == folder.files
    assert (tmp_path / "a" / "tiny.zip").read_bytes() == (tmp_path / "b" / "tiny.zip").read_bytes()
    assert os.listdir(tmp_path / "b") == ["tiny.zip"]  # the staging folder is gone


def test_from_cache_names_every_missing_program_and_packs_nothing(project, tmp_path_factory, tmp_path, run):
    record = read_build_record(project.parent / "out")
    entries = lock_entries_from_record(record.targets)
    for digit, name in enumerate(PROGRAMS):
        entry = entries[name]
        absent = OutputFile(entry.outputs[0].name, str(digit) * 64, 1)
        entries[name] = LockEntry(**{**entry.__dict__, "outputs": (absent, *entry.outputs[1:])})
    write_lock(project.parent / "ptebuild.lock", entries, manifest="tiny.toml")
    cache = cache_dir(tmp_path_factory)
    code, out, err = run("pack", project, "-o", tmp_path / "t.tar.gz", "--from-cache", "--cache", cache)
    assert code == 1 and out == ""
    assert err == (
        f"error: {cache}: not in the cache: tiny_portable (tiny_portable.pte); tiny_xnnpack (tiny_xnnpack.pte); "
        "nothing packed; build them there or pack from a cache that has them\n"
    )
    assert os.listdir(tmp_path) == ["project"]
    with pytest.raises(PackError):
        pack_from_cache(read_lock(project.parent / "ptebuild.lock"), cache, tmp_path / "t.zip")


def test_a_manifest_changed_since_the_build_and_lock_is_not_packed(project, tmp_path_factory, tmp_path, run, monkeypatch):
    """Issue 26 item 9: build and lock, change the model's seed, pack without building. Before, the
    bundle carried the old seed's programs and lock with the new seed's manifest (exit 0) and
    ``verify`` said all ok."""
    record = read_build_record(project.parent / "out")
    write_lock(project.parent / "ptebuild.lock", lock_entries_from_record(record.targets), manifest="tiny.toml")
    project.write_text(project.read_text().replace("seed = 1\n", "seed = 2\n"))
    changed = "manifest field models.tiny.seed changed (1 -> 2)"
    code, _, err = run("pack", project, "-o", tmp_path / "r.tar.gz")
    assert code == 1
    assert err == (
        f"error: {project.parent / 'out'}: program tiny_portable was built from other inputs than the manifest gives now: "
        f"{changed} (and 1 more targets); nothing packed; build it first (`ptebuild build {project}`)\n"
    )
    code, _, err = run("pack", project, "-o", tmp_path / "r.tar.gz", "--from-cache", "--cache", cache_dir(tmp_path_factory))
    assert code == 1
    assert err == (
        f"error: {project.parent / 'ptebuild.lock'}: lock is stale: program tiny_portable was built from other inputs than the "
        f"manifest gives now: {changed} (and 1 more targets); nothing packed; build and lock it "
        f"(`ptebuild build {project}`, `ptebuild lock {project}`), then pack\n"
    )
    assert not (tmp_path / "r.tar.gz").exists()
    # The bundle the old pack wrote (the check above switched off): verify names the contradiction.
    monkeypatch.setattr("ptebuild.release.pack.stale_targets", lambda *args: [])
    assert run("pack", project, "-o", tmp_path / "r.tar.gz")[0] == 0
    code, out, _ = run("verify", tmp_path / "r.tar.gz")
    assert code == 1
    assert (f"r.tar.gz: r/tiny.toml: program tiny_portable was built from other manifest entries than it holds: {changed} "
            "(the bundle mixes two builds: build, lock and pack again)") in out


def test_a_changed_model_source_is_named_and_the_lock_points_to_the_cache(project, tmp_path, run):
    """An edit to the model's code since the build is a changed input too; where the lock still
    matches the manifest (the edit undone, the folder built from it), the cache is the way out."""
    record = read_build_record(project.parent / "out")
    write_lock(project.parent / "ptebuild.lock", lock_entries_from_record(record.targets), manifest="tiny.toml")
    model = project.parent / "tinymodels" / "tiny.py"
    model.write_text(model.read_text() + "\n# edited\n")
    code, _, err = run("pack", project, "-o", tmp_path / "r.tar.gz")
    assert code == 1 and "program tiny_portable was built from other inputs than the manifest gives now: source file " \
                          "tinymodels/tiny.py changed (sha256 " in err
    assert "--from-cache" not in err  # the lock is as stale as the folder
    # The folder holds another build than the manifest and the lock (they agree): the cache has the locked one.
    original = model.read_text().removesuffix("\n# edited\n")
    model.write_text(original)
    entries = lock_entries_from_record(record.targets)
    other = {**record.targets["tiny_portable"], "inputs": {**record.targets["tiny_portable"]["inputs"], "manifest.model.seed": "7"}}
    (project.parent / "out" / "ptebuild.json").write_text(json.dumps(
        {"format": "ptebuild-record", "version": 1, "manifest": "../tiny.toml", "targets": {**record.targets, "tiny_portable": other}}))
    write_lock(project.parent / "ptebuild.lock", entries, manifest="tiny.toml")
    code, _, err = run("pack", project, "-o", tmp_path / "r.tar.gz")
    assert code == 1 and "manifest field models.tiny.seed changed (7 -> 1)" in err
    assert err.rstrip().endswith(f"or pack what ptebuild.lock names from the cache (`ptebuild pack {project} --from-cache`)")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["-o", "t.rar"], "t.rar: unknown archive type; name it NAME.tar.gz, NAME.tgz or NAME.zip"),
        (["-o", "t.zip", "--from-cache", "--out", "x"], "--out and --from-cache exclude each other"),
        (["-o", "t.zip", "--cache", "x"], "--cache only goes with --from-cache"),
        (["-o", "t.zip", "--from-cache", "--cache", "c"], "ptebuild.lock: no lockfile (write it with `ptebuild lock MANIFEST`)"),
    ],
    ids=["bad-suffix", "out-and-from-cache", "cache-alone", "from-cache-without-lock"],
)
def test_usage_errors_exit_2_with_one_line(project, run, argv, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run("pack", project, *argv)
    assert code == 2 and message in err and err.count("\n") == 1


def test_source_date_epoch_dates_the_files_and_the_provenance(project, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")  # 2026-01-01
    result = pack(None, project, None, tmp_path / "t.tar.gz")
    with tarfile.open(result.archive.path) as tar:
        assert {m.mtime for m in tar.getmembers()} == {1767225600}
        statement = json.load(tar.extractfile("t/provenance.intoto.json"))
    assert statement["predicate"]["runDetails"]["metadata"] == {
        "startedOn": "2026-01-01T00:00:00Z",
        "finishedOn": "2026-01-01T00:00:00Z",
    }
    subjects = {s["name"] for s in statement["subject"]}
    assert subjects == {f"{p}.pte" for p in PROGRAMS} | {f"{p}_weights.ptd" for p in PROGRAMS} | {"selected_operators.yaml"}
    deps = {d["name"] for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert "source:tinymodels/tiny.py" in deps


def test_a_weights_file_shared_by_two_programs_is_packed_once(project, tmp_path):
    """Shared data names (issue 11, part 4): the record lists one .ptd under two targets."""
    out = project.parent / "out"
    record_path = out / "ptebuild.json"
    record = json.loads(record_path.read_text())
    shared = record["targets"]["tiny_portable"]["outputs"]["tiny_portable_weights.ptd"]
    record["targets"]["tiny_xnnpack"]["outputs"]["tiny_portable_weights.ptd"] = shared
    record_path.write_text(json.dumps(record))
    result = pack(out, project, None, tmp_path / "t.tar.gz")
    with tarfile.open(result.archive.path) as tar:
        names = tar.getnames()
        statement = json.load(tar.extractfile("t/provenance.intoto.json"))
        sums = tar.extractfile("t/SHA256SUMS").read().decode()
    assert names.count("t/tiny_portable_weights.ptd") == 1
    assert [s["name"] for s in statement["subject"]].count("tiny_portable_weights.ptd") == 1
    assert sums.count("  tiny_portable_weights.ptd\n") == 1


# -- bundles declared in the manifest ([bundles.NAME]) -----------------------------------------------


@pytest.fixture(scope="session")
def bundles_a(tmp_path_factory) -> Path:
    return built_bundles(tmp_path_factory, "a")


@pytest.fixture(scope="session")
def bundles_b(tmp_path_factory) -> Path:
    return built_bundles(tmp_path_factory, "b")


@pytest.fixture
def bundle_copy(bundles_a, tmp_path) -> Path:
    """A private copy of the built bundle project (manifest, models, NOTICE, out/): returns its manifest."""
    return Path(shutil.copytree(bundles_a.parent, tmp_path / "project")) / "tiny.toml"


EDGE_FILES = [
    "NOTICE", "SHA256SUMS", "provenance.intoto.json", "ptebuild.json", "selected_operators.yaml", "tiny.toml",
    "tiny_inside.bpte", "tiny_inside.pte", "tiny_portable.pte", "tiny_portable_weights.ptd",
    "tiny_xnnpack.bpte", "tiny_xnnpack.pte", "tiny_xnnpack_weights.ptd",
]


def test_every_bundle_of_two_clean_builds_is_byte_identical_and_verifies(bundles_a, bundles_b, tmp_path, run):
    """Two builds from clean caches in two folders; `pack` with no --bundle packs every bundle."""
    for manifest, where in ((bundles_a, "a"), (bundles_b, "b")):
        code, out, err = run("pack", manifest, "-o", tmp_path / where)
        assert code == 0, err
        assert out.splitlines()[-1].startswith(f"bundle mobile: 1 targets, 8 files, 4 operators -> {tmp_path / where / 'tiny-mobile.zip'}")
    names = sorted(os.listdir(tmp_path / "a"))
    assert names == ["edge.tar.gz", "tiny-mobile.zip"] == sorted(os.listdir(tmp_path / "b"))
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
        code, out, _ = run("verify", tmp_path / "a" / name)
        assert code == 0 and out.splitlines()[-1].endswith(f"blobs rehashed) -> {tmp_path / 'a' / name}"), out
    with tarfile.open(tmp_path / "a" / "edge.tar.gz") as tar:
        assert sorted(n.removeprefix("edge/") for n in tar.getnames() if n != "edge") == EDGE_FILES
        assert tar.extractfile("edge/NOTICE").read().decode() == NOTICE
        oplist = tar.extractfile("edge/selected_operators.yaml").read()
        record = json.load(tar.extractfile("edge/ptebuild.json"))
    out = bundles_a.parent / "out"
    assert oplist == selected_operators_yaml(merge(program_operators(out / f"{p}.pte") for p in BUNDLE_PROGRAMS))
    assert sorted(record["targets"]) == list(BUNDLE_PROGRAMS)
    assert record["targets"]["tiny_portable"]["runtime"]["minimum"] == "0.7.0"
    assert record["targets"]["tiny_inside"]["runtime"]["files"]["tiny_inside.bpte"] == {"format": "BP08", "schema_version": 2}
    # How a device verifies each .bpte (verify_method_outputs): twice the largest error the check
    # measured plus 1e-5 (issue 26: derived from the check, not a flat value), the same as the build
    # record's; a program without a .bpte has none.
    folder_record = read_build_record(out).targets
    for name, target in record["targets"].items():
        has_bpte = any(f.endswith(".bpte") for f in target["outputs"])
        assert ("bundled_io" in target) == has_bpte == ("bundled_io" in folder_record[name]), name
        if has_bpte:
            measured = folder_record[name]["checked"]["max_abs_error"]
            assert target["bundled_io"] == folder_record[name]["bundled_io"] == {
                "atol": 2 * measured + 1e-5, "rtol": 0.0, "max_error": measured, "margin": 2.0}
            assert target["bundled_io"]["atol"] < (1e-3 if name == "tiny_xnnpack" else 1e-4)  # the check's atol
    with zipfile.ZipFile(tmp_path / "a" / "tiny-mobile.zip") as zf:
        zf.extractall(tmp_path / "x")
    done = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=tmp_path / "x" / "tiny-mobile", capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.count(": OK\n") == 7, done.stdout + done.stderr


def test_a_bundle_carries_its_lock_subset_and_names_itself_in_the_provenance(bundle_copy, bundles_a, tmp_path, run):
    code, _, err = run("lock", bundle_copy, "--cache", bundle_cache(bundles_a))
    assert code == 0, err
    lock = read_lock(bundle_copy.parent / "ptebuild.lock")
    assert sorted(lock.entries) == list(BUNDLE_PROGRAMS) and lock.entries["tiny_xnnpack"].runtime.minimum == (0, 7, 0)
    archive = tmp_path / "m.zip"
    code, _, err = run("pack", bundle_copy, "--bundle", "mobile", "-o", archive)
    assert code == 0, err
    with zipfile.ZipFile(archive) as zf:
        bundled = loads_lock(zf.read("m/ptebuild.lock").decode(), "m/ptebuild.lock")
        statement = json.loads(zf.read("m/provenance.intoto.json"))
    assert list(bundled.entries) == ["tiny_xnnpack"] and bundled.entries["tiny_xnnpack"] == lock.entries["tiny_xnnpack"]
    build = statement["predicate"]["buildDefinition"]
    assert build["externalParameters"]["bundle"] == "mobile" and build["externalParameters"]["targets"] == ["tiny_xnnpack"]
    runtime = build["internalParameters"]["targets"]["tiny_xnnpack"]["runtime"]
    assert (runtime["writer"], runtime["minimum"], runtime["backends"]) == ("1.5.1", "0.7.0", ["XnnpackBackend"])
    subjects = {s["name"] for s in statement["subject"]}
    assert subjects == {"tiny_xnnpack.pte", "tiny_xnnpack_weights.ptd", "tiny_xnnpack.bpte", "selected_operators.yaml"}
    assert run("verify", archive)[0] == 0


def test_from_cache_packs_a_bundle_to_the_same_bytes(bundle_copy, bundles_a, tmp_path, run):
    cache = bundle_cache(bundles_a)
    assert run("lock", bundle_copy, "--cache", cache)[0] == 0
    assert run("pack", bundle_copy, "--bundle", "edge", "-o", tmp_path / "folder" / "edge.tar.gz")[0] == 0
    shutil.rmtree(bundle_copy.parent / "out")  # nothing built here: the cache alone
    code, _, err = run("pack", bundle_copy, "--bundle", "edge", "--from-cache", "--cache", cache, "-o", tmp_path / "cached" / "edge.tar.gz")
    assert code == 0, err
    assert (tmp_path / "folder" / "edge.tar.gz").read_bytes() == (tmp_path / "cached" / "edge.tar.gz").read_bytes()
    assert os.listdir(tmp_path / "cached") == ["edge.tar.gz"]


def test_bundles_go_into_the_dist_folder_by_default(bundle_copy, run):
    code, out, err = run("pack", bundle_copy, "--bundle", "mobile", "--json")
    assert code == 0, err
    [document] = json.loads(out)
    dist = bundle_copy.parent / "dist"
    assert document["archive"] == str(dist / "tiny-mobile.zip") and document["bundle"] == "mobile"
    assert os.listdir(dist) == ["tiny-mobile.zip"]  # the staging folder is gone


def test_a_programs_shared_weights_file_goes_with_it(bundle_copy, tmp_path):
    """The record of a shared data name lists the one .ptd under each program that uses it."""
    out = bundle_copy.parent / "out"
    record = json.loads((out / "ptebuild.json").read_text())
    record["targets"]["tiny_xnnpack"]["outputs"]["tiny_portable_weights.ptd"] = record["targets"]["tiny_portable"]["outputs"]["tiny_portable_weights.ptd"]
    (out / "ptebuild.json").write_text(json.dumps(record))
    result = pack(None, bundle_copy, None, tmp_path / "m.zip", bundle="mobile")
    assert "tiny_portable_weights.ptd" in result.files and result.targets == ("tiny_xnnpack",)


def test_a_bundle_that_fails_to_pack_leaves_no_archive(bundle_copy, tmp_path, run):
    ptd = bundle_copy.parent / "out" / "tiny_xnnpack_weights.ptd"
    ptd.write_bytes(ptd.read_bytes()[:-1] + b"\0")
    code, _, err = run("pack", bundle_copy, "-o", tmp_path / "dist")
    assert code == 1 and "tiny_xnnpack fails verification: tiny_xnnpack_weights.ptd: sha256 mismatch" in err and err.count("\n") == 1
    assert os.listdir(tmp_path / "dist") == []  # edge packed fine, but nothing is put in place


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--bundle", "mobil"], "--bundle: {manifest} has no bundle 'mobil' (did you mean 'mobile'?); name one of edge, mobile"),
        (["-o", "two.tar.gz"], "-o two.tar.gz: names one archive, but 2 bundles are packed; give a folder, or one --bundle"),
        (["--bundle", "edge", "-o", "NOTICE"],
         "-o NOTICE: not a folder (give the folder the bundles go into, or NAME.tar.gz with one --bundle)"),
    ],
    ids=["unknown-bundle", "one-archive-two-bundles", "output-is-a-file"],
)
def test_bundle_usage_errors_exit_2_with_one_line(bundle_copy, run, argv, message, monkeypatch):
    monkeypatch.chdir(bundle_copy.parent)
    code, _, err = run("pack", bundle_copy, *argv)
    assert (code, err) == (2, f"error: {message.format(manifest=bundle_copy)}\n")


def test_an_include_glob_that_matches_nothing_is_located(bundle_copy, run, tmp_path):
    bundle_copy.write_text(bundle_copy.read_text().replace('include = ["NOTICE"]', 'include = ["NOTICE", "LICENSE*"]'))
    code, _, err = run("pack", bundle_copy, "--bundle", "edge", "-o", tmp_path / "e.tar.gz")
    assert (code, err) == (2, f"error: {bundle_copy}: bundles.edge.include[1]: 'LICENSE*' matches no file in {bundle_copy.parent}; give globs of files beside the manifest\n")
    bundle_copy.write_text(bundle_copy.read_text().replace('"LICENSE*"', '"out/tiny_portable.pte"'))
    code, _, err = run("pack", bundle_copy, "--bundle", "edge", "-o", tmp_path / "e.tar.gz")
    assert code == 2 and err == (
        f"error: {bundle_copy}: bundles.edge.include[1]: out/tiny_portable.pte would be packed as 'tiny_portable.pte', "
        "the name of the output tiny_portable.pte (in case or exactly); rename it\n"
    )
    assert not (tmp_path / "e.tar.gz").exists()


def test_a_manifest_without_bundles(project, run, tmp_path):
    code, _, err = run("pack", project, "--bundle", "edge", "-o", tmp_path / "x.tar.gz")
    assert (code, err) == (2, f"error: --bundle: {project} declares no bundles (add [bundles.NAME] programs = [...])\n")
    code, _, err = run("pack", project)
    assert (code, err) == (2, f"error: pack: {project} declares no bundles: give the archive to write (-o NAME.tar.gz)\n")
