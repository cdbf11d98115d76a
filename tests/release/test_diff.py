"""`ptebuild diff OLD.tar.gz NEW.tar.gz`: what changed between two releases, program by program."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from release_build import built_bundles

from ptebuild import cli
from ptebuild.release.diff import Change, diff_bundles
from ptebuild.release.pack import pack
from ptebuild.runtime.record import read_build_record


def next_release(text: str) -> str:
    """The bundle project's next release: other weights (seed 2); tiny_inside keeps one method;
    tiny_xnnpack is gone (with its bundle); tiny_fresh is new."""
    text = text.replace("seed = 1\n", "seed = 2\n")
    text = text.replace('[programs.tiny_inside]\nmodel = "tiny"\n', '[programs.tiny_inside]\nmodel = "tiny"\nmethods = ["forward"]\n')
    text = text.replace('[programs.tiny_xnnpack]\nmodel = "tiny"\nbackend = "xnnpack"\ndata_name = "tiny_xnnpack_weights"\n', "")
    text = text.replace('[bundles.mobile]\nprograms = ["tiny_x*"]\noutput = "tiny-mobile.zip"\nbundle_io = true\n', "")
    text = text.replace('programs = ["tiny_portable", "tiny_inside", "tiny_xnnpack"]', 'programs = ["tiny_portable", "tiny_inside", "tiny_fresh"]')
    return text + '\n[programs.tiny_fresh]\nmodel = "tiny"\nbackend = "portable"\nmethods = ["score"]\n'


@pytest.fixture(scope="module")
def releases(tmp_path_factory) -> dict[str, Path]:
    """The edge bundle of the bundle project's build, of a second clean build, and of the next release."""
    found = {}
    for which, edit in (("a", None), ("b", None), ("c", next_release)):
        manifest = built_bundles(tmp_path_factory, which, edit)
        if which == "c":
            assert "tiny_xnnpack" not in manifest.read_text()
        found[which] = pack(None, manifest, None, tmp_path_factory.mktemp(f"release-{which}") / "edge.tar.gz", bundle="edge").archive.path
    return found


def sizes(out: Path, program: str) -> int:
    return sum(size for _, _, size in read_build_record(out).entries()[program].outputs)


def test_two_clean_builds_are_the_same_release(releases, capsys):
    report = diff_bundles(releases["a"], releases["b"])
    assert report.same and [p.change for p in report.programs] == [Change.SAME] * 3
    assert cli.main(["diff", str(releases["a"]), str(releases["b"])]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"the same: {releases['a']} -> {releases['b']}"
    assert lines[0].split() == ["tiny_inside", "same", "bytes", str(report.programs[0].size_before), "bytes", "->",
                                str(report.programs[0].size_after), "bytes"]


def test_each_program_says_what_changed(releases, tmp_path_factory, capsys):
    old_out = tmp_path_factory.getbasetemp() / "bundles-a" / "project" / "out"
    new_out = tmp_path_factory.getbasetemp() / "bundles-c" / "project" / "out"
    report = diff_bundles(releases["a"], releases["c"])
    changes = {p.name: p for p in report.programs}
    assert {name: p.change for name, p in changes.items()} == {
        "tiny_fresh": Change.ADDED,
        "tiny_inside": Change.CHANGED,
        "tiny_portable": Change.WEIGHTS,
        "tiny_xnnpack": Change.REMOVED,
    }
    assert (changes["tiny_fresh"].size_before, changes["tiny_fresh"].size_after) == (None, sizes(new_out, "tiny_fresh"))
    assert (changes["tiny_xnnpack"].size_before, changes["tiny_xnnpack"].size_after) == (sizes(old_out, "tiny_xnnpack"), None)
    assert changes["tiny_portable"].size_before == sizes(old_out, "tiny_portable") == changes["tiny_portable"].size_after
    assert changes["tiny_portable"].detail == "tiny_portable_weights.ptd"
    assert changes["tiny_inside"].detail.startswith("tiny_inside.pte: method 'score'")
    assert report.files == ("tiny.toml: changed",) and not report.same
    assert cli.main(["diff", str(releases["a"]), str(releases["c"])]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:4]] == ["tiny_fresh", "tiny_inside", "tiny_portable", "tiny_xnnpack"]
    assert lines[0].split("  ", 1)[1].split() == ["new", "program", "-", "->", str(sizes(new_out, "tiny_fresh")), "bytes"]
    assert lines[1].endswith(f"  ({changes['tiny_inside'].detail})")
    assert lines[2].split()[1:4] == ["new", "weights", "only"] and lines[3].split()[1:] == ["removed", str(sizes(old_out, "tiny_xnnpack")), "bytes", "->", "-"]
    assert lines[-2:] == ["tiny.toml: changed", f"4 of 4 programs differ: {releases['a']} -> {releases['c']}"]
    assert cli.main(["diff", str(releases["a"]), str(releases["c"]), "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert [(p["name"], p["change"]) for p in document["programs"]] == [
        ("tiny_fresh", "added"), ("tiny_inside", "changed"), ("tiny_portable", "new-weights"), ("tiny_xnnpack", "removed")]
    assert document["programs"][3]["files_before"] == {
        name: size for name, _, size in read_build_record(old_out).entries()["tiny_xnnpack"].outputs}


def test_a_bundle_and_a_program_are_not_compared(releases, tmp_path_factory, capsys):
    pte = tmp_path_factory.getbasetemp() / "bundles-a" / "project" / "out" / "tiny_portable.pte"
    assert cli.main(["diff", str(releases["a"]), str(pte)]) == 2
    assert capsys.readouterr().err == f"error: diff: {releases['a']} and {pte}: compare two bundles, or two .pte or .ptd files\n"
