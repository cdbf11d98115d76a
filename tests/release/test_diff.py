"""`ptebuild diff OLD.tar.gz NEW.tar.gz`: what changed between two releases, program by program."""

from __future__ import annotations

import json
import re
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
        # new weights (seed 2): the .pte names them by SHA-256, so it changed with them
        "tiny_portable": Change.PROGRAM_AND_WEIGHTS,
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
    assert lines[2].split()[1:5] == ["new", "program", "and", "weights"] and lines[3].split()[1:] == ["removed", str(sizes(old_out, "tiny_xnnpack")), "bytes", "->", "-"]
    assert lines[-2:] == ["tiny.toml: changed", f"4 of 4 programs differ: {releases['a']} -> {releases['c']}"]
    assert cli.main(["diff", str(releases["a"]), str(releases["c"]), "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert [(p["name"], p["change"]) for p in document["programs"]] == [
        ("tiny_fresh", "added"), ("tiny_inside", "changed"), ("tiny_portable", "program-and-weights"), ("tiny_xnnpack", "removed")]
    assert document["programs"][3]["files_before"] == {
        name: size for name, _, size in read_build_record(old_out).entries()["tiny_xnnpack"].outputs}


def test_a_bundle_and_a_program_are_not_compared(releases, tmp_path_factory, capsys):
    pte = tmp_path_factory.getbasetemp() / "bundles-a" / "project" / "out" / "tiny_portable.pte"
    assert cli.main(["diff", str(releases["a"]), str(pte)]) == 2
    assert capsys.readouterr().err == f"error: diff: {releases['a']} and {pte}: compare two bundles, or two .pte or .ptd files\n"


# Two models whose programs share one weights file: a new seed for `other` gives `tiny_other`
# new weights (and, its weight keys being SHA-256 digests, a new .pte), while `tiny_portable`'s
# .pte stays byte-identical and needs only the new shared .ptd.
SHARED = """
[models.other]
factory = "tinymodels.tiny:make_tiny"
kwargs = { width = 8 }
seed = 5

[models.other.methods.forward]
inputs = [{ name = "x", shape = [2, 6] }]

[programs.tiny_other]
model = "other"
backend = "portable"
data_name = "tiny_portable_weights"

[bundles.shared]
programs = ["tiny_portable", "tiny_other"]
"""


@pytest.fixture(scope="module")
def shared_releases(tmp_path_factory) -> tuple[Path, Path]:
    """The shared-weights project packed twice: with ``other``'s seed 5, then 6."""
    from project_copy import copy_project

    found = []
    for seed in (5, 6):
        root = tmp_path_factory.mktemp(f"shared-seed-{seed}")
        manifest = copy_project(root / "project")
        text = manifest.read_text().replace('[programs.tiny_xnnpack]\nmodel = "tiny"\nbackend = "xnnpack"\ndata_name = "tiny_xnnpack_weights"\n', "")
        manifest.write_text(text + SHARED.replace("seed = 5", f"seed = {seed}"))
        assert cli.main(["build", str(manifest), "--cache", str(root / "cache")]) == 0
        found.append(pack(None, manifest, None, root / "shared.tar.gz", bundle="shared").archive.path)
    return found[0], found[1]


@pytest.mark.slow
def test_new_weights_say_what_a_device_must_replace_and_why(shared_releases, capsys):
    old, new = shared_releases
    changes = {p.name: p for p in diff_bundles(old, new).programs}
    # tiny_other's weights moved: its .pte names them by SHA-256, so it changed with them; shipping
    # the new .ptd alone would fail at load. tiny_portable's .pte is byte-identical: the .ptd alone.
    assert changes["tiny_other"].change is Change.PROGRAM_AND_WEIGHTS
    assert changes["tiny_other"].ship == ("tiny_other.pte", "tiny_portable_weights.ptd")
    assert changes["tiny_other"].why == ("same plan and operators; the .pte names its weights by SHA-256, "
                                         "so it changes with them: ship both")
    assert changes["tiny_portable"].change is Change.WEIGHTS
    assert changes["tiny_portable"].ship == ("tiny_portable_weights.ptd",)
    assert changes["tiny_portable"].why == "tiny_portable.pte is byte-identical and names only keys the new .ptd holds"
    assert cli.main(["diff", str(old), str(new)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert re.split(r"\s{2,}", lines[0])[:2] == ["tiny_other", "new program and weights"]
    assert lines[0].endswith("ship tiny_other.pte, tiny_portable_weights.ptd  (same plan and operators; the .pte names "
                             "its weights by SHA-256, so it changes with them: ship both)")
    assert re.split(r"\s{2,}", lines[1])[:2] == ["tiny_portable", "new weights only"]
    assert lines[1].endswith("ship tiny_portable_weights.ptd  (tiny_portable.pte is byte-identical and names only keys the new .ptd holds)")
    assert cli.main(["diff", str(old), str(new), "--json"]) == 1
    document = {p["name"]: p for p in json.loads(capsys.readouterr().out)["programs"]}
    assert (document["tiny_other"]["change"], document["tiny_other"]["ship"]) == (
        "program-and-weights", ["tiny_other.pte", "tiny_portable_weights.ptd"])


@pytest.mark.slow
def test_the_robot_built_with_two_seeds_ships_program_and_weights(tmp_path):
    """The issue's case: the robot policy built with seed 20261129, then 20261130: its XNNPACK
    program's .pte differs in its weight keys (19 places), so a device needs both files."""
    import shutil

    root = Path(__file__).resolve().parents[2]
    archives = []
    for seed in (20261129, 20261130):
        project = tmp_path / f"seed-{seed}"
        shutil.copytree(root / "manifests" / "models", project / "manifests" / "models",
                        ignore=shutil.ignore_patterns("__pycache__"))
        text = (root / "manifests" / "robot.toml").read_text().replace("seed = 20261129", f"seed = {seed}")
        text = text[:text.index("[programs.policy_xnnpack_int8]")] + '[bundles.robot-xnnpack]\nprograms = ["policy_xnnpack*"]\n'
        (project / "manifests" / "robot.toml").write_text(text)
        manifest = project / "manifests" / "robot.toml"
        assert cli.main(["build", str(manifest), "--cache", str(tmp_path / "cache")]) == 0
        archives.append(pack(None, manifest, None, tmp_path / f"robot-{seed}.tar.gz").archive.path)
    [change] = [p for p in diff_bundles(*archives).programs if p.name == "policy_xnnpack"]
    assert change.change is Change.PROGRAM_AND_WEIGHTS
    assert change.ship == ("policy_weights.ptd", "policy_xnnpack.pte")
