"""The no-op stamp: a build with nothing to do replays the last no-op without looking further;
what moved is checked by content: the same bytes under a new stat still replay (and the stamp
takes the new stats), other bytes send the build down the full path again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from project_copy import copy_project

from ptebuild.builder import noop

ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}


def build(manifest: Path, cache: Path, *extra: str, trace: bool = False) -> tuple[dict, subprocess.CompletedProcess]:
    flags = ["-X", "importtime"] if trace else []
    result = subprocess.run(
        [sys.executable, *flags, "-m", "ptebuild", "build", str(manifest), "--cache", str(cache), "--json", *extra],
        capture_output=True, text=True, env=ENV,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), result


def imported(result: subprocess.CompletedProcess) -> set[str]:
    return {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}


def settle() -> None:
    time.sleep(noop.RACY_NS / 1e9 + 0.1)  # files written just now are not trusted by a stamp


# -- the stamp itself (builder.noop), on plain files ------------------------------------------


REPLAY = {"report": {"targets": []}, "events": []}


def later() -> int:
    """A build start after every file a test just made has aged (their bytes are trusted)."""
    return time.time_ns() + 2 * noop.RACY_NS


def stamp_of(tmp_path, files=(), folders=(), entries=(), digests=None, since=None):
    path = tmp_path / "cache" / "noop" / "stamp.json"
    path.parent.mkdir(parents=True, exist_ok=True)  # before the listing of tmp_path is taken
    looked_at = noop.LookedAt([str(f) for f in files], [str(f) for f in folders], [str(e) for e in entries], digests)
    assert noop.write(path, looked_at, REPLAY, later() if since is None else since)
    return path


def never_read(monkeypatch):
    def read(path, like="xxh3:"):
        raise AssertionError(f"{path} was read: its stat should have answered")

    monkeypatch.setattr(noop, "_bytes_digest", read)
    monkeypatch.setattr(noop, "_listing_digest", read)


def test_an_unmoved_stamp_replays_from_stats_alone(tmp_path, monkeypatch):
    source = tmp_path / "model.py"
    source.write_text("x = 1\n")
    stamp = stamp_of(tmp_path, files=[source], folders=[tmp_path])
    never_read(monkeypatch)
    assert noop.replay(stamp) == REPLAY


def test_the_same_bytes_under_a_new_stat_replay_and_the_stamp_takes_the_new_stat(tmp_path, monkeypatch):
    source, manifest = tmp_path / "model.py", tmp_path / "tiny.toml"
    source.write_text("x = 1\n")
    manifest.write_text("[models]\n")
    stamp = stamp_of(tmp_path, files=[source, manifest], folders=[tmp_path])
    before = json.loads(stamp.read_bytes())
    # As a git checkout does: the file written anew (a new inode, new times), the same bytes.
    (tmp_path / "model.py.new").write_text("x = 1\n")
    os.replace(tmp_path / "model.py.new", source)
    os.utime(manifest, ns=(time.time_ns(), time.time_ns()))  # touched
    assert noop.replay(stamp) == REPLAY
    after = json.loads(stamp.read_bytes())
    assert after["files"][str(source)][:4] == [*noop._file_facts(os.stat(source))]
    assert after["files"][str(source)] != before["files"][str(source)]
    assert after["written"] <= time.time_ns()  # the replay's own moment
    # The new stats were taken in the moment of the change (racy): the next replay reads again,
    # and once a replay has seen them aged, they alone answer.
    real = time.time_ns
    with monkeypatch.context() as patched:
        patched.setattr(noop.time, "time_ns", lambda: real() + 2 * noop.RACY_NS)
        assert noop.replay(stamp) == REPLAY
    never_read(monkeypatch)
    assert noop.replay(stamp) == REPLAY


def test_other_bytes_never_replay(tmp_path):
    source = tmp_path / "model.py"
    source.write_text("x = 1\n")
    stamp = stamp_of(tmp_path, files=[source])
    st = os.stat(source)
    source.write_text("x = 2\n")  # the same size
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same mtime: only the ctime and bytes tell
    assert noop.replay(stamp) is None
    assert noop.replay(stamp) is None  # nothing was rewritten


def coarse(tick_ns: int):
    """``os.stat`` on a file system whose times tick every ``tick_ns`` (FAT, some network mounts)."""
    def stat(path):
        st = os.stat(path)
        times = {f"st_{t}_ns": getattr(st, f"st_{t}_ns") // tick_ns * tick_ns for t in ("atime", "mtime", "ctime")}
        return os.stat_result(tuple(st)[:10], times)

    return stat


def test_a_stat_taken_in_the_tick_of_the_last_change_is_checked_by_content(tmp_path, monkeypatch):
    tick = 10**15  # all the test's times fall in one tick
    stat = coarse(tick)

    def coarse_stat(path):
        try:
            return stat(path)
        except OSError:
            return None

    monkeypatch.setattr(noop, "_stat", coarse_stat)
    source = tmp_path / "model.py"
    source.write_text("x = 1\n")
    changed = os.stat(source).st_ctime_ns // tick * tick
    stamp = stamp_of(tmp_path, files=[source], since=changed + 2 * noop.RACY_NS)
    document = json.loads(stamp.read_bytes())
    stamp.write_text(json.dumps({**document, "written": changed}))  # as a replay in that tick rewrites it
    source.write_text("x = 2\n")  # a second edit in the same tick: size, mtime, inode and ctime all the same
    assert noop.replay(stamp) is None


def test_a_new_entry_in_a_listed_folder_means_a_full_build(tmp_path):
    package = tmp_path / "layers"
    package.mkdir()
    stamp = stamp_of(tmp_path, folders=[package])
    (package / "swap.tmp").write_text("")
    (package / "swap.tmp").unlink()  # an editor's swap file, gone again: the same listing
    assert noop.replay(stamp) == REPLAY
    (package / "blocks.py").write_text("")  # a new module that may shadow an import
    assert noop.replay(stamp) is None


def test_a_file_that_appears_or_vanishes_means_a_full_build(tmp_path):
    present, absent = tmp_path / "present.py", tmp_path / "absent.py"
    present.write_text("")
    stamp = stamp_of(tmp_path, files=[present, absent])
    absent.write_text("")
    assert noop.replay(stamp) is None
    absent.unlink()
    present.unlink()
    assert noop.replay(stamp) is None


def test_the_builds_own_digest_is_kept_and_checked(tmp_path, monkeypatch):
    import hashlib

    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"\1" * 1000)
    with monkeypatch.context() as patched:
        never_read(patched)  # the build's SHA-256 is kept: the file is not read to write the stamp
        stamp = stamp_of(tmp_path, files=[weights], digests={str(weights): hashlib.sha256(b"\1" * 1000).hexdigest()})
    os.utime(weights, ns=(time.time_ns(), time.time_ns()))
    assert noop.replay(stamp) == REPLAY  # verified by SHA-256
    weights.write_bytes(b"\2" * 1000)
    assert noop.replay(stamp) is None


def test_no_stamp_is_written_over_what_changed_before_the_build_began_or_while_it_ran(tmp_path):
    source = tmp_path / "model.py"
    source.write_text("x = 1\n")
    path = tmp_path / "cache" / "noop" / "stamp.json"
    looked_at = noop.LookedAt([str(source)], [], [])
    assert not noop.write(path, looked_at, REPLAY, since=time.time_ns())  # changed just before it began
    assert not noop.write(path, looked_at, REPLAY, since=os.stat(source).st_ctime_ns - 10**9)  # changed while it ran
    assert not path.exists()
    assert noop.write(path, looked_at, REPLAY, since=later())


def test_a_damaged_stamp_is_no_stamp(tmp_path):
    source = tmp_path / "model.py"
    source.write_text("")
    stamp = stamp_of(tmp_path, files=[source])
    text = stamp.read_text()
    for damaged in (text[: len(text) // 2], "[]", json.dumps({**json.loads(text), "format": "ptebuild-noop 1"}),
                    json.dumps({**json.loads(text), "files": {str(source): [1]}})):
        stamp.write_text(damaged)
        assert noop.replay(stamp) is None


# -- through the command line -------------------------------------------------------------------


@pytest.fixture(scope="module")
def stamped(tmp_path_factory):
    """The tiny project built, then no-op'd once so that a stamp exists."""
    root = tmp_path_factory.mktemp("noop")
    manifest = copy_project(root / "project")
    cache = root / "cache"
    build(manifest, cache, "--only", "tiny_portable")
    record = (manifest.parent / "out" / "ptebuild.json").read_bytes()
    settle()
    document, _ = build(manifest, cache, "--only", "tiny_portable")
    assert [p["status"] for p in document["targets"]] == ["cached"]
    # The no-op's record entry (its runtime read back from the cache's memo) is the cold build's.
    assert (manifest.parent / "out" / "ptebuild.json").read_bytes() == record
    assert list((cache / "noop").iterdir()), "the no-op wrote no stamp"
    return manifest, cache, document


def test_a_stamped_noop_replays_without_the_build_machinery(stamped):
    manifest, cache, before = stamped
    document, result = build(manifest, cache, "--only", "tiny_portable", trace=True)
    modules = imported(result)
    assert "ptebuild.builder.noop" in modules
    assert not {"ptebuild.builder.build", "ptebuild.store", "torch", "sqlite3"} & modules
    assert {**document, "seconds": 0} == {**before, "seconds": 0}


def same_size_and_times(path: Path, text: str) -> None:
    """Write ``text`` (as long as the file's bytes) in place, and put its times back: only its
    ctime and its bytes tell."""
    st = os.stat(path)
    assert len(text.encode()) == st.st_size
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


MOVED = {
    # change -> (what the full build then reports, what it does before the stamp is written)
    "edit the model's source": "built",
    "edit the model's source, same size and times": "built",
    "add a module to the model's package": "built",
    "add a module to a folder of the model's package that had none": "built",
    "add a module to the manifest's folder": "cached",
    "delete an output": "cached",
    "edit an output, same size and times": "cached",
    "install a distribution": "cached",
    "drop the cache entry": "built",
}


@pytest.mark.parametrize("change", MOVED)
def test_anything_that_moved_means_a_full_build(stamped, tmp_path, change):
    def prepare(project: Path) -> None:
        (project / "tinymodels" / "assets").mkdir()
        (project / "tinymodels" / "assets" / "notes.txt").write_text("not a module\n")

    copy, cache = copied(stamped, tmp_path, prepare)
    project = copy.parent
    source = project / "tinymodels" / "tiny.py"
    output = project / "out" / "tiny_portable.pte"
    marker = None
    if change == "edit the model's source":
        source.write_text(source.read_text() + "\n# edited\n")
    elif change == "edit the model's source, same size and times":
        text = source.read_text()
        same_size_and_times(source, text[:-1] + ("#" if text[-1] != "#" else " "))
    elif change == "add a module to the model's package":
        (project / "tinymodels" / "extra.py").write_text("")
    elif change == "add a module to a folder of the model's package that had none":
        (project / "tinymodels" / "assets" / "extra.py").write_text("")
    elif change == "add a module to the manifest's folder":
        (project / "helpers.py").write_text("")
    elif change == "delete an output":
        output.unlink()
    elif change == "edit an output, same size and times":
        data = bytearray(output.read_bytes())
        data[len(data) // 2] ^= 0xFF
        st = os.stat(output)
        output.write_bytes(bytes(data))
        os.utime(output, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif change == "install a distribution":
        # A new dist-info folder on sys.path: the discovered dependencies must be checked again.
        for entry in map(Path, sys.path):
            if entry.name == "site-packages" and os.access(entry, os.W_OK):
                marker = entry / "ptebuild_noop_test_marker-1.0.dist-info"
                marker.mkdir()
                break
        else:
            pytest.skip("no writable site-packages")
    else:
        for path in (cache / "actions").rglob("*.json"):
            path.unlink()
    try:
        document, result = build(copy, cache, "--only", "tiny_portable", trace=True)
    finally:
        if marker is not None:
            marker.rmdir()
    assert "ptebuild.builder.build" in imported(result), change
    assert document["targets"][0]["status"] == MOVED[change], change
    assert (project / "out" / "tiny_portable.pte").is_file()
    if change.startswith("edit an output"):
        assert output.read_bytes() != bytes(data), "the edited output was left in place"


def copied(stamped, tmp_path, prepare=None):
    """A copy of the stamped project and cache whose own stamp is written and replays
    (``prepare(project)`` first, if given)."""
    import shutil

    manifest, cache, _ = stamped
    project = tmp_path / "project"
    shutil.copytree(manifest.parent, project, symlinks=True)
    shutil.copytree(cache, tmp_path / "cache", symlinks=True)
    copy, cache = project / manifest.name, tmp_path / "cache"
    if prepare is not None:
        prepare(project)
    for _ in range(2):  # first: the copies' stamp is written; second: replayed
        settle()
        build(copy, cache, "--only", "tiny_portable")
    _, result = build(copy, cache, "--only", "tiny_portable", trace=True)
    assert "ptebuild.builder.build" not in imported(result), "the copy's no-op was not replayed"
    return copy, cache


@pytest.mark.parametrize("change", ["touch the manifest", "write the model's source anew, same bytes", "touch an output"])
def test_a_stat_that_moved_over_the_same_bytes_still_replays(stamped, tmp_path, change):
    copy, cache = copied(stamped, tmp_path)
    project = copy.parent
    if change == "touch the manifest":
        os.utime(copy)
    elif change == "touch an output":
        os.utime(project / "out" / "tiny_portable.pte")
    else:  # as git checkout writes a file: a new inode and new times
        source = project / "tinymodels" / "tiny.py"
        (project / "tiny.py.new").write_bytes(source.read_bytes())
        os.replace(project / "tiny.py.new", source)
    for _ in range(2):  # at once (the change is racy: checked by content), then again
        document, result = build(copy, cache, "--only", "tiny_portable", trace=True)
        assert "ptebuild.builder.build" not in imported(result), change
        assert [(p["name"], p["status"]) for p in document["targets"]] == [("tiny_portable", "cached")]
    settle()
    build(copy, cache, "--only", "tiny_portable")  # the stamp takes the aged stats
    document, result = build(copy, cache, "--only", "tiny_portable", trace=True)
    assert not {"ptebuild.builder.build", "hashlib"} & imported(result), "the stats did not answer alone"


def test_other_bytes_in_the_manifest_take_the_full_path(stamped, tmp_path):
    copy, cache = copied(stamped, tmp_path)
    copy.write_text(copy.read_text() + "\n# a comment: other bytes, the same plan\n")
    document, result = build(copy, cache, "--only", "tiny_portable", trace=True)
    assert "ptebuild.builder.build" in imported(result)
    assert [p["status"] for p in document["targets"]] == ["cached"]
