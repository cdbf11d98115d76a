"""The quick reading of ``ptebuild build``'s command line gives what argparse gives, or nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ptebuild.cli import build_parser, build_quick


def argparse_values(argv: list[str]) -> dict:
    values = vars(build_parser("build").parse_args(argv))
    values.pop("handler")
    return values


def test_the_defaults_are_argparses_for_every_option():
    assert build_quick.parse(["build", "m.toml"]) == argparse_values(["build", "m.toml"])
    assert set(build_quick.DEFAULTS) == set(argparse_values(["build", "m.toml"]))


@pytest.mark.parametrize("argv", [
    ["build", "m.toml", "--json"],
    ["build", "--json", "m.toml", "--keep-going", "--explain"],
    ["build", "m.toml", "-j", "3", "--out", "dist", "--no-daemon"],
    ["build", "m.toml", "--jobs", "12", "--cache", "/tmp/c", "--locked", "--timings"],
    ["build", "manifests/robot.toml"],
])
def test_each_form_read_quickly_is_what_argparse_reads(argv):
    values = build_quick.parse(argv)
    assert values is not None
    assert values == argparse_values(argv)


@pytest.mark.parametrize("argv", [
    ["build"],  # no manifest: argparse's message
    ["build", "a.toml", "b.toml"],  # two manifests
    ["build", "m.toml", "--json", "--json"],
    ["build", "m.toml", "-j"],
    ["build", "m.toml", "-j", "x"],  # argparse says what is wrong
    ["build", "m.toml", "-j", "-1"],
    ["build", "m.toml", "--out=dist"],
    ["build", "m.toml", "--expl"],  # an abbreviation: argparse's to take or refuse
    ["build", "m.toml", "--only", "a"],
    ["build", "m.toml", "--help"],
    ["--debug", "build", "m.toml"],
    ["verify", "m.toml"],
])
def test_every_other_form_goes_to_argparse(argv):
    assert build_quick.parse(argv) is None


def test_a_no_op_build_imports_no_argparse(tmp_path):
    """The point of the module: the quick path is taken by the CLI (a missing manifest is
    reported by the build, without argparse having been imported)."""
    code = ("import sys; from ptebuild.cli import main; "
            f"rc = main(['build', {str(tmp_path / 'missing.toml')!r}, '--json', '--cache', {str(tmp_path / 'c')!r}]); "
            "print(rc, 'argparse' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["2", "False"]
