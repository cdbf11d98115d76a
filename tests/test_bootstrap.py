"""bootstrap.sh's usage errors: one line and exit 2, before anything is installed.

(What it installs, with uv and with pip, is measured and compared by bench/bench_setup.py on
fresh clones; .ci/run runs it on CI's fresh machine.)"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("argv", "env", "message"), [
    (["--tests"], {}, "bootstrap: unknown option '--tests': use ./bootstrap.sh, or ./bootstrap.sh --test for the tests too"),
    ([], {"PTEBUILD_INSTALLER": "conda"},
     "bootstrap: PTEBUILD_INSTALLER=conda: use uv, pip, or leave it unset (uv where it can be had, else pip)"),
], ids=["unknown option", "unknown installer"])
def test_usage_errors_exit_2_with_one_line_and_install_nothing(tmp_path, argv, env, message):
    # A copy of the script alone: were it to go on, it would fail at once (no constraints.txt).
    script = tmp_path / "bootstrap.sh"
    script.write_bytes((ROOT / "bootstrap.sh").read_bytes())
    script.chmod(0o755)
    done = subprocess.run([str(script), *argv], capture_output=True, text=True, env={**os.environ, **env}, timeout=60)
    assert (done.returncode, done.stderr.strip(), done.stdout) == (2, message, "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bootstrap.sh"]


def test_the_repository_tracks_no_venv_and_no_link_out_of_it():
    # A fresh clone is what CI sets up: a tracked .venv-buildgrid (once a worktree's link to
    # another checkout's venv) made bootstrap fail with "File exists" before any test ran.
    listed = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    tracked = [line.split("\t", 1) for line in listed.splitlines()]
    venvs = [path for _, path in tracked if path.split("/")[0].startswith(".venv")]
    links_out = [path for mode, path in tracked if mode.startswith("120000")
                 and not (ROOT / path).resolve().is_relative_to(ROOT)]
    assert (venvs, links_out) == ([], [])
