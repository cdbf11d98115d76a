"""One behaviour, two clients: the command line and the library give the same result for the same
request (what a pack holds, which targets a selection builds and why, the names in the report)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from project_copy import copy_project

import ptebuild
from ptebuild import cli
from ptebuild.errors import UsageError
from ptebuild.results import TargetResult

ONE_BUNDLE = """
[bundles.edge]
programs = ["tiny_xnnpack"]
"""
SECOND_BUNDLE = """
[bundles.lab]
programs = ["tiny_portable"]
"""


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> tuple[Path, Path]:
    """The tiny project with both programs sharing one weights file and one bundle declared,
    built once: (manifest, cache)."""
    root = tmp_path_factory.mktemp("two-clients")
    manifest = copy_project(root / "project")
    text = manifest.read_text().replace('data_name = "tiny_portable_weights"', 'data_name = "tiny_weights"')
    manifest.write_text(text.replace('data_name = "tiny_xnnpack_weights"', 'data_name = "tiny_weights"') + ONE_BUNDLE)
    cache = root / "cache"
    report = ptebuild.build(manifest, ptebuild.BuildRequest(cache=str(cache)))
    assert report.ok, [t.message for t in report.targets]
    return manifest, cache


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_pack_writes_the_same_archive_from_both_clients(shared, tmp_path, capsys):
    manifest, _ = shared
    (tmp_path / "cli").mkdir()
    (tmp_path / "api").mkdir()
    code, out, err = run(capsys, "pack", manifest, "-o", tmp_path / "cli" / "tiny-1.0.tar.gz", "--json")
    assert code == 0, err
    [from_cli] = json.loads(out)
    result = ptebuild.pack(manifest, tmp_path / "api" / "tiny-1.0.tar.gz")
    # The manifest declares one bundle: both clients pack it, not the whole build.
    assert (result.bundle, result.targets) == ("edge", ("tiny_xnnpack",))
    assert (from_cli["bundle"], from_cli["targets"], from_cli["files"]) == (result.bundle, list(result.targets), list(result.files))
    assert "tiny_weights.ptd" in result.files and "tiny_portable.pte" not in result.files
    assert (tmp_path / "cli" / "tiny-1.0.tar.gz").read_bytes() == (tmp_path / "api" / "tiny-1.0.tar.gz").read_bytes()


def test_a_manifest_with_several_bundles_is_refused_one_archive_by_both_clients(shared, tmp_path, capsys):
    manifest, _ = shared
    several = tmp_path / "several.toml"
    several.write_text(manifest.read_text() + SECOND_BUNDLE)
    for name in ("tinymodels", "out"):
        (tmp_path / name).symlink_to(manifest.parent / name)
    with pytest.raises(UsageError) as refused:
        ptebuild.pack(several, tmp_path / "tiny.tar.gz")
    code, _, err = run(capsys, "pack", several, "-o", tmp_path / "tiny.tar.gz")
    assert code == 2 and err == f"error: {refused.value}\n"
    assert str(refused.value) == f"-o {tmp_path / 'tiny.tar.gz'}: names one archive, but 2 bundles are packed; give a folder, or one --bundle"
    assert not (tmp_path / "tiny.tar.gz").exists()
    named = ptebuild.pack(several, tmp_path / "lab.tar.gz", bundle="lab")
    assert run(capsys, "pack", several, "-o", tmp_path / "lab-cli.tar.gz", "--bundle", "lab")[0] == 0
    assert named.targets == ("tiny_portable",)


def test_a_selection_brings_its_shared_weights_group_along_and_says_why(shared, capsys):
    manifest, cache = shared
    report = ptebuild.build(manifest, ptebuild.BuildRequest(cache=str(cache), only=["tiny_xnnpack"]))
    code, out, err = run(capsys, "build", manifest, "--cache", cache, "--only", "tiny_xnnpack", "--json")
    assert code == 0, err
    document = json.loads(out)
    why = ("shares tiny_weights.ptd with tiny_xnnpack; a shared weights file is built whole "
           "(give the programs other data names to build one alone)")
    assert [(t.name, t.brought_along) for t in report.targets] == [("tiny_portable", why), ("tiny_xnnpack", "")]
    assert [(t["name"], t.get("brought_along", "")) for t in document["targets"]] == [("tiny_portable", why), ("tiny_xnnpack", "")]
    code, out, _ = run(capsys, "build", manifest, "--cache", cache, "--only", "tiny_xnnpack")
    assert code == 0 and f"tiny_portable: brought along: {why}" in out.splitlines()


def test_the_json_report_speaks_the_typed_reports_vocabulary(shared, capsys):
    manifest, cache = shared
    report = ptebuild.build(manifest, ptebuild.BuildRequest(cache=str(cache), only=["tiny_xnnpack"]))
    code, out, _ = run(capsys, "build", manifest, "--cache", cache, "--only", "tiny_xnnpack", "--json")
    document = json.loads(out)
    assert code == 0 and set(document) == set(report.to_json()) == {"manifest", "out_dir", "seconds", "ok", "targets"}
    typed = {f.name for f in dataclasses.fields(ptebuild.BuildReport)} | {"ok"}
    assert set(document) <= typed
    fields = {f.name for f in dataclasses.fields(TargetResult)}
    fields |= {name for name, value in vars(TargetResult).items() if isinstance(value, property)}  # checked
    for entry, target in zip(document["targets"], report.targets):
        assert set(entry) <= fields, set(entry) - fields
        assert (entry["name"], entry["status"], entry["check"], entry["figures"]) == (
            target.name, target.status.value, target.check, list(target.figures))
        assert target.checked is not None and entry["checked"] == target.checked.to_json()
