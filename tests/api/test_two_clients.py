"""One behaviour, two clients: the command line and the library give the same result for the same
request (what a pack holds, which targets a selection builds and why, the names in the report)."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
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
            target.name, target.status.value, target.check, [f.to_json() for f in target.figures])
        assert target.checked is not None and entry["checked"] == target.checked.to_json()


# -- the table of docs/python-api.md: each command's options are the library's parameters -------------

_ROW = re.compile(r"^\| `ptebuild ([a-z]+)`(?:, `([a-z]+)`)*")
_PAIR = re.compile(r"`(--?[a-z][a-z-]*)` → `([a-z_.]+)(?:\(\))?`")


def _table() -> dict[str, str]:
    """docs/python-api.md's table: command -> its options column."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "python-api.md").read_text()
    rows = {}
    for line in page.splitlines():
        if line.startswith("| `ptebuild "):
            commands = re.findall(r"`(?:ptebuild )?([a-z]+)`", line.split("|")[1])
            for command in commands:
                rows[command] = line.split("|")[3]
    return rows


def _options(command: str) -> dict[str, argparse.Action]:
    """A subcommand's options by their longest spelling (positional arguments left out)."""
    parser = cli.build_parser(command)
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {max(a.option_strings, key=len): a for a in sub.choices[command]._actions
            if a.option_strings and a.dest != "help"}


def _library(command: str):
    """The function a command calls, and the value type whose fields take its options."""
    from ptebuild.api.request import BuildRequest, RemoteCache

    calls = {"build": ptebuild.build, "lock": ptebuild.lock, "pack": ptebuild.pack_release, "verify": ptebuild.verify,
             "inspect": ptebuild.inspect, "diff": ptebuild.diff, "run": ptebuild.run, "doctor": ptebuild.doctor}
    fields = set(inspect.signature(calls[command]).parameters)
    if command in ("build", "lock"):
        fields |= set(BuildRequest._defaults) | {f"remote.{f}" for f in RemoteCache._defaults}
    if command == "inspect":
        fields.add("operator_list")
    return fields


def test_the_table_of_commands_and_library_calls_is_complete_and_true():
    """Every command has its row; every option of a command is in its row, either as the library
    parameter or request field it becomes (which must exist) or as a way of showing the result; a
    new option fails here until the table says what it is in the library."""
    rows = _table()
    assert set(rows) == set(cli.SUBCOMMANDS), set(cli.SUBCOMMANDS) ^ set(rows)
    for command, column in rows.items():
        options = _options(command)
        said = set(re.findall(r"`(--?[a-z][a-z-]*)`", column))
        assert said == set(options), f"{command}: the table's options differ from the command's: {said ^ set(options)}"
        if not options:
            continue
        library = _library(command)
        for option, parameter in _PAIR.findall(column):
            assert parameter in library, f"{command} {option}: the table names {parameter!r}, not a parameter of the library"


def test_the_request_a_command_makes_sets_the_field_the_table_names():
    """Each ``build`` option given on the command line sets the request field the table names."""
    from ptebuild.cli.build import request_from

    given = {"--out": "o", "--only": "a", "--skip-backend": "cuda", "--jobs": "3", "--shard": "1/2", "--executor": "local",
             "--ray-address": "x:1", "--cache": "c", "--remote-cache": "http://h/p", "--remote-cache-header": "A=b",
             "--remote-upload": "no", "--remote-secret-env": "S"}
    default = request_from(cli.build_parser("build").parse_args(["build", "m.toml"]))
    for option, parameter in _PAIR.findall(_table()["build"]):
        value = given.get(option)
        argv = ["build", "m.toml", option] + ([value] if value else [])
        if option == "--cache":
            argv = ["build", "m.toml", "--cache", "c"]
        request = request_from(cli.build_parser("build").parse_args(argv))
        head, _, tail = parameter.partition(".")
        got, was = getattr(request, head), getattr(default, head)
        if tail:
            got, was = getattr(got, tail), (getattr(was, tail) if was is not None else None)
        assert got != was, f"{option} did not set {parameter}"


def test_lock_takes_what_build_takes_but_the_lock_checks(capsys, tmp_path):
    """A lock is written from a plain build: ``ptebuild lock`` offers no --locked or --reproduce, and the
    library refuses them the same way (before, the command dropped --reproduce and the library ran it)."""
    assert "--reproduce" not in _options("lock") and "--locked" not in _options("lock")
    for option in ("--reproduce", "--check"):
        assert cli.main(["lock", str(tmp_path / "m.toml"), option]) == 2
        assert f"unrecognized arguments: {option}" in capsys.readouterr().err
    for request in (ptebuild.BuildRequest(reproduce=True), ptebuild.BuildRequest(locked=True)):
        with pytest.raises(UsageError, match=r"^lock: a lock is written from a plain build; drop --locked and --reproduce "):
            ptebuild.lock(tmp_path / "m.toml", request)


def test_the_reproducibility_rebuilds_old_name_still_works_for_one_release(capsys, tmp_path):
    """"check" is the numeric check; the reproducibility rebuild is --reproduce. The old flag and field
    still work, each saying its new name once."""
    from ptebuild.cli.build import RENAMED_CHECK

    with pytest.warns(DeprecationWarning, match=r"BuildRequest\(check=...\) is now reproduce=...; check goes in the next release"):
        request = ptebuild.BuildRequest(check=True)
    assert request == ptebuild.BuildRequest(reproduce=True) and request.reproduce
    assert _options("build")["--check"].help == argparse.SUPPRESS and "--reproduce" in _options("build")  # not in --help
    assert cli.main(["build", str(tmp_path / "m.toml"), "--check"]) == 2  # the manifest is missing: parsed, then refused
    err = capsys.readouterr().err
    assert err.splitlines()[0] == RENAMED_CHECK
