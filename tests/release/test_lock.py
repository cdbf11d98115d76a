"""The lockfile: write/read round trip, stable text, bad files, and the --locked messages."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ptebuild.deps import Dependencies
from ptebuild.errors import FormatError, UsageError
from ptebuild.release.lock import (
    Lock,
    LockEntry,
    MismatchKind,
    check_locked,
    compare_lock,
    dumps_lock,
    loads_lock,
    lock_entries_from_record,
    lock_entry_from_result,
    read_lock,
    write_lock,
)
from ptebuild.results import ActionResult, OutputFile

HEX = "0123456789abcdef"
sha = st.text(HEX, min_size=64, max_size=64)
names = st.text(string.ascii_letters + string.digits + "_-./:@ ", min_size=1, max_size=20)
values = st.text(min_size=0, max_size=20)
prefixes = st.sampled_from(["manifest.", "source:", "weights:", "toolchain.", ""])


@st.composite
def entries(draw) -> LockEntry:
    inputs = {}
    for prefix, name in draw(st.lists(st.tuples(prefixes, names), max_size=6)):
        if prefix == "" and name.startswith(("manifest.", "source:", "weights:", "toolchain.")):
            continue
        inputs[prefix + name] = draw(sha if prefix in ("source:", "weights:") else values)
    deps = draw(
        st.none()
        | st.builds(
            lambda s, d: Dependencies(tuple(sorted(s.items())), tuple(sorted(d.items()))),
            st.dictionaries(names, sha, max_size=3),
            st.dictionaries(names, values, max_size=3),
        )
    )
    outputs = draw(
        st.none()
        | st.dictionaries(names, st.tuples(sha, st.integers(0, 2**40)), max_size=3).map(
            lambda d: tuple(OutputFile(n, s, size) for n, (s, size) in sorted(d.items()))
        )
    )
    return LockEntry(
        name=draw(names),
        kind=draw(st.sampled_from(["program", "shims"])),
        key=draw(st.text(HEX, min_size=32, max_size=32)),
        backend=draw(st.none() | st.sampled_from(["portable", "xnnpack"])),
        inputs=inputs,
        deps=deps,
        outputs=outputs,
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(entries(), max_size=4, unique_by=lambda e: e.name), st.none() | names)
def test_write_then_read_gives_the_same_lock(tmp_path_factory, items, manifest):
    path = tmp_path_factory.mktemp("lock") / "ptebuild.lock"
    written = write_lock(path, {e.name: e for e in items}, manifest=manifest)
    read = read_lock(path)
    assert read.manifest == manifest
    assert dict(read.entries) == {e.name: e for e in items}
    assert compare_lock(read, written.entries) == []
    assert dumps_lock(read) == path.read_text(encoding="utf-8")  # stable: rewriting changes nothing


RECORD = {
    "tiny_xnnpack": {
        "kind": "program",
        "backend": "xnnpack",
        "key": "0" * 32,
        "manifest": "../tiny.toml",
        "inputs": {
            "manifest.model.kwargs.width": "16",
            "source:tinymodels/tiny.py": "a" * 64,
            "weights:weights/w.pt": "b" * 64,
            "toolchain.torch": "2.13.0+cpu",
            "schema": "ptebuild-action-key 1",
        },
        "deps": {"sources": {"layers/blocks.py": "c" * 64}, "dists": {"torchao": "0.18.0"}},
        "check": "executorch-runtime",
        "outputs": {
            "tiny_xnnpack.pte": {"sha256": "d" * 64, "bytes": 6512},
            "tiny_xnnpack_weights.ptd": {"sha256": "e" * 64, "bytes": 3596},
        },
    },
    "old_style": {"kind": "program", "outputs": {"old_style.pte": {"sha256": "f" * 64, "bytes": 1}}},
}


def locked() -> Lock:
    return Lock(lock_entries_from_record(RECORD), "tiny.toml")


def changed(name: str, **fields) -> dict:
    entries = lock_entries_from_record(RECORD)
    entry = entries[name]
    entries[name] = LockEntry(**{**entry.__dict__, **fields})
    return entries


def test_the_lock_text_is_sorted_and_grouped(tmp_path):
    write_lock(tmp_path / "ptebuild.lock", locked().entries, manifest="tiny.toml")
    text = (tmp_path / "ptebuild.lock").read_text()
    assert text.startswith("# ptebuild.lock: written by `ptebuild lock`")
    assert text.index("[targets.old_style]") < text.index("[targets.tiny_xnnpack]")
    for table in ("manifest", "sources", "weights", "toolchain", "other", "deps.sources", "deps.dists"):
        assert f"[targets.tiny_xnnpack.{table}]" in text
    assert '[targets.tiny_xnnpack.outputs."tiny_xnnpack.pte"]' in text
    assert '"weights/w.pt" = "' + "b" * 64 in text
    # An entry without inputs or deps (an older record) writes no empty tables.
    assert "[targets.old_style.deps" not in text and "[targets.old_style.sources]" not in text


def test_entries_from_a_record_without_inputs_or_deps():
    entry = lock_entries_from_record(RECORD)["old_style"]
    assert (entry.key, dict(entry.inputs), entry.deps) == ("", {}, None)
    assert entry.outputs == (OutputFile("old_style.pte", "f" * 64, 1),)


def test_a_changed_weights_file_makes_the_lock_stale():
    entries = changed("tiny_xnnpack", key="1" * 32, inputs={**RECORD["tiny_xnnpack"]["inputs"], "weights:weights/w.pt": "9" * 64})
    [mismatch] = compare_lock(locked(), entries)
    assert (mismatch.kind, mismatch.target, mismatch.subject) == (MismatchKind.STALE, "tiny_xnnpack", "weights:weights/w.pt")
    assert str(mismatch) == (
        "lock is stale for program tiny_xnnpack: weights file weights/w.pt changed "
        "(sha256 bbbbbbbbbbbb... -> 999999999999...)"
    )


@pytest.mark.parametrize(
    "name, before, after, message",
    [
        ("toolchain.torch", "2.13.0+cpu", "2.14.0", "torch version changed (2.13.0+cpu -> 2.14.0)"),
        ("source:tinymodels/tiny.py", "a" * 64, None, "source file tinymodels/tiny.py is no longer used"),
        ("source:tinymodels/new.py", None, "1" * 64, "source file tinymodels/new.py is new"),
        ("manifest.model.kwargs.width", "16", "32", "manifest entry model.kwargs.width changed (16 -> 32)"),
    ],
)
def test_each_changed_input_is_named(name, before, after, message):
    inputs = dict(RECORD["tiny_xnnpack"]["inputs"])
    inputs.pop(name, None)
    if after is not None:
        inputs[name] = after
    [mismatch] = compare_lock(locked(), changed("tiny_xnnpack", key="1" * 32, inputs=inputs))
    assert str(mismatch) == f"lock is stale for program tiny_xnnpack: {message}"


def test_a_changed_discovered_dependency_is_named():
    deps = Dependencies((("layers/blocks.py", "c" * 64),), (("torchao", "0.19.0"),))
    [mismatch] = compare_lock(locked(), changed("tiny_xnnpack", deps=deps))
    assert str(mismatch) == "lock is stale for program tiny_xnnpack: discovered distribution torchao changed (0.18.0 -> 0.19.0)"


def test_other_bytes_from_the_same_inputs_are_an_output_mismatch():
    entry = lock_entries_from_record(RECORD)["tiny_xnnpack"]
    outputs = (OutputFile("tiny_xnnpack.pte", "7" * 64, 6512), entry.outputs[1])
    [mismatch] = compare_lock(locked(), changed("tiny_xnnpack", outputs=outputs))
    assert (mismatch.kind, mismatch.subject) == (MismatchKind.OUTPUT, "tiny_xnnpack.pte")
    assert str(mismatch).startswith(
        "program tiny_xnnpack: output tiny_xnnpack.pte differs from the lock (sha256 777777777777..., 6512 bytes; "
        "the lock has dddddddddddd..., 6512 bytes)"
    )


def test_before_building_only_inputs_are_compared():
    entries = changed("tiny_xnnpack", outputs=None, deps=None)
    assert compare_lock(locked(), entries) == []


def test_targets_missing_on_either_side():
    entries = lock_entries_from_record(RECORD)
    new = entries.pop("tiny_xnnpack")
    entries["renamed"] = LockEntry(**{**new.__dict__, "name": "renamed"})
    messages = [str(m) for m in compare_lock(locked(), entries)]
    assert messages == [
        "lock is stale: program renamed is not in the lock (run `ptebuild lock MANIFEST`)",
        "lock is stale: it has program tiny_xnnpack, which the manifest no longer declares (run `ptebuild lock MANIFEST`)",
    ]
    assert [m.kind for m in compare_lock(locked(), {"old_style": entries["old_style"]}, subset=True)] == []


GOOD = 'format = "ptebuild-lock"\nversion = 1\n[targets.a]\nkind = "program"\nkey = "k"\n'


@pytest.mark.parametrize(
    "text, message",
    [
        ("format = \n", "ptebuild.lock: not valid TOML: Invalid value (at line 1, column 10)"),
        ('format = "other"\n', "ptebuild.lock: format: not a ptebuild lockfile"),
        ('format = "ptebuild-lock"\nversion = 7\n', "ptebuild.lock: version: lockfile version 7, this ptebuild reads 1 and 2"),
        (GOOD + '[targets.a.runtime]\nwriter = "soon"\n', "ptebuild.lock: targets.a.runtime: writer: 'soon' is not a version"),
        (GOOD + 'runtime = 3\n', "ptebuild.lock: targets.a.runtime: expected a table"),
        (GOOD + "colour = 1\n", "ptebuild.lock: targets.a.colour: unknown field"),
        (GOOD.replace('key = "k"', "key = 3"), "ptebuild.lock: targets.a.key: expected a string"),
        (GOOD + '[targets.a.sources]\n"x.py" = 1\n', 'ptebuild.lock: targets.a.sources."x.py": expected a string'),
        (GOOD + '[targets.a.outputs."a.pte"]\nsha256 = "zz"\nsize = 1\n', 'targets.a.outputs."a.pte".sha256: \'zz\' is not a sha256 hex digest'),
        (GOOD + f'[targets.a.outputs."a.pte"]\nsha256 = "{"a" * 64}"\nsize = -1\n', 'targets.a.outputs."a.pte".size: expected a size in bytes'),
    ],
)
def test_a_bad_lockfile_is_one_line_naming_the_field(tmp_path, text, message):
    path = tmp_path / "ptebuild.lock"
    path.write_text(text)
    with pytest.raises(FormatError) as caught:
        read_lock(path)
    line = str(caught.value)
    assert message in line and line.startswith(str(path)) and "\n" not in line
    assert line.endswith("(regenerate it with `ptebuild lock MANIFEST`)")


def test_a_missing_lockfile_says_how_to_write_one(tmp_path):
    with pytest.raises(UsageError, match=r"ptebuild.lock: no lockfile \(write it with `ptebuild lock MANIFEST`\)"):
        read_lock(tmp_path / "ptebuild.lock")


def test_loads_lock_accepts_what_dumps_lock_writes():
    lock = locked()
    assert loads_lock(dumps_lock(lock), "x").entries == lock.entries


def test_check_locked_reports_a_missing_lock_as_a_mismatch(tmp_path):
    [mismatch] = check_locked(tmp_path / "ptebuild.lock", locked().entries)
    assert mismatch.kind == MismatchKind.NO_LOCK
    assert str(mismatch) == (
        f"{tmp_path / 'ptebuild.lock'}: no lockfile, and --locked needs one "
        "(write it with `ptebuild lock MANIFEST` and commit it)"
    )
    write_lock(tmp_path / "ptebuild.lock", locked().entries)
    assert check_locked(tmp_path / "ptebuild.lock", locked().entries) == []


def test_entries_from_action_results():
    result = ActionResult(
        key="9" * 32,
        target="p",
        kind="program",
        outputs=(OutputFile("p.pte", "a" * 64, 3),),
        inputs={"toolchain.torch": "2.13.0"},
        deps=Dependencies((("m.py", "b" * 64),), ()),
        backend="portable",
    )
    entry = lock_entry_from_result(result)
    assert (entry.name, entry.key, entry.backend, entry.outputs) == ("p", "9" * 32, "portable", result.outputs)
    before = lock_entry_from_result(result, with_outputs=False)
    assert before.outputs is None
    assert compare_lock(Lock({"p": entry}), {"p": before}) == []


def test_a_version_1_lock_is_still_read_and_a_new_one_names_the_runtimes(tmp_path):
    """Version 2 added each program's runtime support; version 1 (without it) reads as before."""
    from ptebuild.runtime.compat import FileFormat, RuntimeSupport

    path = tmp_path / "ptebuild.lock"
    path.write_text(GOOD)
    entry = read_lock(path).entries["a"]
    assert (entry.kind, entry.key, entry.runtime) == ("program", "k", None)
    support = RuntimeSupport((FileFormat("a.pte", "ET12", 0), FileFormat("a_weights.ptd", "FT01", 0)), (1, 5, 1),
                             ("constant-segment", "external-data"), ("XnnpackBackend",))
    lock = write_lock(path, {"a": LockEntry("a", "program", "k", runtime=support)}, manifest="m.toml")
    text = path.read_text()
    assert "version = 2\n" in text and '[targets.a.runtime]\nbackends = [\n    "XnnpackBackend",\n]\nguaranteed = ">=1.5.1,<1.7.0"\n' in text
    assert '[targets.a.runtime.files."a.pte"]\nformat = "ET12"\nschema_version = 0\n' in text
    assert read_lock(path).entries == lock.entries
