"""The build record (ptebuild.runtime.record): ``ptebuild.json`` written, merged and read back on
real folders; its entries round-trip; a malformed record is refused with a message that names the
file, the field and the fix; a file is attributed to a program only with the bytes recorded; and
builders sharing a folder lose none of each other's entries."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ptebuild.errors import FormatError
from ptebuild.runtime.record import (
    FORMAT,
    RECORD_NAME,
    VERSION,
    BuildRecord,
    ProgramFiles,
    RecordEntry,
    bundled_io_entry,
    file_matches,
    read_build_record,
    read_record_document,
    update_record,
    validate_record,
)

REBUILD = "build the folder again with `ptebuild build MANIFEST` (it rewrites the record)"


def write(folder: Path, name: str, data: bytes) -> tuple[str, str, int]:
    """Write an output file; its ``(name, sha256, size)`` as a record entry lists it."""
    (folder / name).write_bytes(data)
    return name, hashlib.sha256(data).hexdigest(), len(data)


def program(folder: Path, name: str, files: dict[str, bytes], **fields) -> RecordEntry:
    outputs = tuple(write(folder, f, data) for f, data in sorted(files.items()))
    return RecordEntry(kind="program", manifest="../robot.toml", key=f"key-{name}", outputs=outputs, backend="xnnpack",
                       **fields)


# -- entries ------------------------------------------------------------------------------------


def test_bundled_io_tolerances():
    assert bundled_io_entry(1e-3) == {"atol": 1e-3, "rtol": 0.0}
    assert bundled_io_entry(1e-3, max_error=0.25) == {"atol": 2 * 0.25 + 1e-5, "rtol": 0.0, "max_error": 0.25, "margin": 2.0}
    assert bundled_io_entry(1e-3, max_error=0.0)["atol"] == 1e-5  # a check that measured no error: the floor


def test_a_program_entry_round_trips_with_every_field(tmp_path):
    entry = program(
        tmp_path, "policy", {"policy.pte": b"pte", "policy_weights.ptd": b"ptd", "policy.bpte": b"bpte"},
        inputs={"source:m.py": "ab" * 32}, deps={"python": {"m": "cd" * 32}}, check="portable-runner",
        data_name="policy_weights", methods=("forward", "score"), shared_data="shared_weights",
        runtime={"writer": "1.5.1"}, bundled_io=bundled_io_entry(1e-4, 1e-6),
        weights_in_pte=({"name": "bias", "bytes": 12},), checked={"verdict": "passed"},
        workarounds={"conv1d-bias": "why"}, insight={"delegation": None},
    )
    document = entry.to_json()
    assert document["outputs"] == {"policy.bpte": {"sha256": hashlib.sha256(b"bpte").hexdigest(), "bytes": 4},
                                   "policy.pte": {"sha256": hashlib.sha256(b"pte").hexdigest(), "bytes": 3},
                                   "policy_weights.ptd": {"sha256": hashlib.sha256(b"ptd").hexdigest(), "bytes": 3}}
    assert document["methods"] == ["forward", "score"] and document["weights_in_pte"] == [{"name": "bias", "bytes": 12}]
    assert RecordEntry.from_json(json.loads(json.dumps(document))) == entry


def test_a_plain_entry_writes_only_what_it_has(tmp_path):
    shims = RecordEntry(kind="shims", manifest="../robot.toml", key="k", outputs=(write(tmp_path, "libshims.so", b"so"),))
    document = shims.to_json()
    assert set(document) == {"kind", "manifest", "key", "outputs", "inputs", "deps"}
    plain = program(tmp_path, "p", {"p.pte": b"x"}).to_json()
    assert set(plain) == {"kind", "manifest", "key", "outputs", "inputs", "deps", "backend", "check", "data_name", "methods"}
    assert RecordEntry.from_json(document) == shims


def test_an_entry_of_an_older_writer_reads_with_defaults():
    entry = RecordEntry.from_json({"outputs": {"a.pte": {"sha256": "ab" * 32, "bytes": 1}},
                                   "runtime": "not an object", "weights_in_pte": [{"name": "w"}, "junk"]})
    assert (entry.kind, entry.manifest, entry.key, entry.backend, entry.methods) == ("program", "", "", None, ())
    assert entry.runtime is None and entry.weights_in_pte == ({"name": "w"},)
    assert entry.outputs == (("a.pte", "ab" * 32, 1),)


# -- writing and merging ------------------------------------------------------------------------


def test_written_and_read_back(tmp_path):
    entry = program(tmp_path, "policy", {"policy.pte": b"pte", "policy_weights.ptd": b"ptd"})
    update_record(tmp_path, "../robot.toml", {"policy": entry})
    document = json.loads((tmp_path / RECORD_NAME).read_text())
    assert (document["format"], document["version"], document["manifest"]) == (FORMAT, VERSION, "../robot.toml")
    assert list(document["targets"]) == ["policy"]
    record = read_build_record(tmp_path)
    assert record == BuildRecord(tmp_path / RECORD_NAME, document["targets"])
    assert record.entries() == {"policy": entry}
    assert (tmp_path / RECORD_NAME).read_text().endswith("}\n")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left


def test_an_update_keeps_the_targets_it_did_not_build(tmp_path):
    update_record(tmp_path, None, {"a": program(tmp_path, "a", {"a.pte": b"a"})})
    update_record(tmp_path, None, {"b": program(tmp_path, "b", {"b.pte": b"b"}).to_json()})  # a dict is taken as is
    assert sorted(read_build_record(tmp_path).targets) == ["a", "b"]
    assert "manifest" not in json.loads((tmp_path / RECORD_NAME).read_text())


def test_a_renamed_program_takes_its_files_from_the_old_entry(tmp_path):
    """The old name's entry loses the files the new one wrote; an entry left with none goes."""
    update_record(tmp_path, None, {
        "old": program(tmp_path, "old", {"policy.pte": b"1", "policy_weights.ptd": b"2"}),
        "other": program(tmp_path, "other", {"other.pte": b"3"}),
    })
    update_record(tmp_path, None, {"new": program(tmp_path, "new", {"policy.pte": b"4"})})
    targets = read_build_record(tmp_path).targets
    assert sorted(targets) == ["new", "old", "other"]
    assert list(targets["old"]["outputs"]) == ["policy_weights.ptd"]
    update_record(tmp_path, None, {"new": program(tmp_path, "new", {"policy.pte": b"4", "policy_weights.ptd": b"5"})})
    assert sorted(read_build_record(tmp_path).targets) == ["new", "other"]


def test_a_no_op_update_writes_nothing(tmp_path):
    entry = program(tmp_path, "a", {"a.pte": b"a"})
    update_record(tmp_path, "m.toml", {"a": entry})
    before = (tmp_path / RECORD_NAME).stat()
    update_record(tmp_path, "m.toml", {"a": entry})
    after = (tmp_path / RECORD_NAME).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    update_record(tmp_path, "other.toml", {"a": entry})  # the manifest changed: written
    assert (tmp_path / RECORD_NAME).stat().st_ino != before.st_ino


def test_a_record_that_cannot_be_read_is_replaced(tmp_path):
    (tmp_path / RECORD_NAME).write_text("{ not json")
    update_record(tmp_path, None, {"a": program(tmp_path, "a", {"a.pte": b"a"})})
    assert list(read_build_record(tmp_path).targets) == ["a"]


def test_an_empty_update_of_a_folder_without_a_record_writes_one(tmp_path):
    update_record(tmp_path, None, {})
    assert json.loads((tmp_path / RECORD_NAME).read_text()) == {"format": FORMAT, "version": VERSION, "targets": {}}


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from ptebuild.runtime.record import RecordEntry, update_record
    folder, who, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    for i in range(count):
        name = f"{who}{i}"
        entry = RecordEntry("program", "m.toml", name, ((f"{name}.pte", "ab" * 32, 1),))
        update_record(folder, "m.toml", {name: entry})
    """
)


def test_builders_sharing_a_folder_lose_none_of_each_others_entries(tmp_path):
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), who, "25"]) for who in "abcd"]
    assert [w.wait(timeout=60) for w in writers] == [0, 0, 0, 0]
    assert sorted(read_build_record(tmp_path).targets) == sorted(f"{who}{i}" for who in "abcd" for i in range(25))


# -- reading ------------------------------------------------------------------------------------


def test_a_folder_without_a_record(tmp_path):
    assert read_build_record(tmp_path) is None and read_record_document(tmp_path) is None


BAD_RECORDS = [
    ([], 'not a ptebuild build record (no "format": "ptebuild-record")'),
    ({"format": "ptebuild-lock", "version": 1, "targets": {}}, 'not a ptebuild build record (no "format": "ptebuild-record")'),
    ({"format": FORMAT, "version": 2, "targets": {}}, "build record version 2, this ptebuild reads 1"),
    ({"format": FORMAT, "targets": {}}, "build record version None, this ptebuild reads 1"),
    ({"format": FORMAT, "version": 1, "targets": []}, "'targets' must be an object of target name to entry"),
    ({"format": FORMAT, "version": 1, "targets": {"a": []}}, "targets.a.outputs must be an object of file name to digest"),
    ({"format": FORMAT, "version": 1, "targets": {"a": {"outputs": ["a.pte"]}}},
     "targets.a.outputs must be an object of file name to digest"),
    ({"format": FORMAT, "version": 1, "targets": {"a": {"outputs": {"a.pte": 3}}}},
     "targets.a.outputs.a.pte: needs a plain file name with sha256 and bytes"),
    ({"format": FORMAT, "version": 1, "targets": {"a": {"outputs": {"a.pte": {"sha256": "ab", "bytes": "3"}}}}},
     "targets.a.outputs.a.pte: needs a plain file name with sha256 and bytes"),
    ({"format": FORMAT, "version": 1, "targets": {"a": {"outputs": {"a.pte": {"bytes": 3}}}}},
     "targets.a.outputs.a.pte: needs a plain file name with sha256 and bytes"),
    ({"format": FORMAT, "version": 1, "targets": {"a": {"outputs": {"../a.pte": {"sha256": "ab", "bytes": 3}}}}},
     "targets.a.outputs.../a.pte: needs a plain file name with sha256 and bytes"),
]


@pytest.mark.parametrize(("document", "message"), BAD_RECORDS, ids=[
    "not-an-object", "other-format", "version-2", "no-version", "targets-list", "entry-list", "outputs-list",
    "output-number", "bytes-text", "no-sha256", "a-path"])
def test_a_malformed_record_is_refused(tmp_path, document, message):
    (tmp_path / RECORD_NAME).write_text(json.dumps(document))
    with pytest.raises(FormatError) as raised:
        read_build_record(tmp_path)
    assert str(raised.value) == f"{tmp_path / RECORD_NAME}: {message}; {REBUILD}"


def test_validate_record_returns_the_document():
    document = {"format": FORMAT, "version": 1, "targets": {"a": {"outputs": {"a.pte": {"sha256": "ab", "bytes": 3}}}}}
    assert validate_record(Path("x/ptebuild.json"), document) is document


def test_a_record_that_is_not_json_or_cannot_be_read(tmp_path):
    (tmp_path / RECORD_NAME).write_text('{"format": ')
    with pytest.raises(FormatError, match=rf"^{re.escape(str(tmp_path / RECORD_NAME))}: not valid JSON: .*; build the folder again"):
        read_build_record(tmp_path)
    (tmp_path / RECORD_NAME).unlink()
    (tmp_path / RECORD_NAME).mkdir()
    with pytest.raises(FormatError) as raised:
        read_build_record(tmp_path)
    assert str(raised.value) == f"{tmp_path / RECORD_NAME}: cannot read: Is a directory; {REBUILD}"


# -- what the record says of the files beside it ------------------------------------------------


@pytest.fixture
def folder(tmp_path) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    update_record(out, None, {
        "policy": program(out, "policy", {"policy.pte": b"p", "b_weights.ptd": b"b", "a_weights.ptd": b"a", "policy.bpte": b"x"}),
        "critic": program(out, "critic", {"critic.pte": b"c"}),
        "shims": RecordEntry("shims", "../robot.toml", "k", (write(out, "libshims.so", b"so"),)),
    })
    return out


def test_the_files_of_each_program(folder):
    assert read_build_record(folder).programs == {
        "critic": ProgramFiles("critic.pte", ()),
        "policy": ProgramFiles("policy.pte", ("a_weights.ptd", "b_weights.ptd"), "policy.bpte"),
    }


def test_a_file_belongs_to_a_program_only_with_its_recorded_bytes(folder, tmp_path):
    record = read_build_record(folder)
    assert record.programs_using(folder / "a_weights.ptd") == ["policy"]
    assert record.programs_using(folder / "libshims.so") == []  # not a program's
    (tmp_path / "a_weights.ptd").write_bytes(b"a")
    assert record.programs_using(tmp_path / "a_weights.ptd") == []  # the same bytes in another folder
    (folder / "a_weights.ptd").write_bytes(b"z")  # copied over: same name and size, other bytes
    assert record.programs_using(folder / "a_weights.ptd") == []
    (folder / "a_weights.ptd").unlink()
    assert record.programs_using(folder / "a_weights.ptd") == []


def test_a_file_shared_by_programs_names_them_all(tmp_path):
    """Programs built together into one .ptd (shared weights) all own it; a later build of one of
    them alone takes it from the others."""
    update_record(tmp_path, None, {name: RecordEntry("program", "m", name, (write(tmp_path, "shared.ptd", b"w"),))
                                   for name in ("b", "a")})
    assert read_build_record(tmp_path).programs_using(tmp_path / "shared.ptd") == ["a", "b"]
    update_record(tmp_path, None, {"a": RecordEntry("program", "m", "a2", (write(tmp_path, "shared.ptd", b"w"),))})
    assert read_build_record(tmp_path).programs_using(tmp_path / "shared.ptd") == ["a"]


def test_file_matches(tmp_path):
    _, sha256, size = write(tmp_path, "f.bin", b"hello")
    assert file_matches(tmp_path / "f.bin", sha256, size)
    assert not file_matches(tmp_path / "f.bin", sha256, size + 1)
    assert not file_matches(tmp_path / "f.bin", "0" * 64, size)
    assert not file_matches(tmp_path / "gone.bin", sha256, size)
    asked: list[Path] = []

    def digest(path: Path) -> tuple[str, int]:
        asked.append(path)
        return sha256, size

    assert file_matches(tmp_path / "f.bin", sha256, size, digest) and asked == [tmp_path / "f.bin"]
    assert not file_matches(tmp_path / "f.bin", sha256, size - 1, digest) and len(asked) == 1  # the size first: not hashed
