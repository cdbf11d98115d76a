"""Mismatches found while exporting are located at the manifest key that is wrong, exit 2 (issue 26
item 5): each ``tests/manifests/misfits/misfit-*.toml`` built through the command line gives its
``# expect:`` line. Before, these were located at ``programs.X`` and most exited 1: an input shape
that does not fit ("torch.export of method 'forward' failed: RuntimeError: a and b must have same
reduction dim"), an input too many, a factory attribute that does not exist (no did-you-mean),
weights of another model ("Missing key(s) ... Unexpected key(s)")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

MISFITS = Path(__file__).resolve().parents[1] / "manifests" / "misfits"
CASES = sorted(MISFITS.glob("misfit-*.toml"))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Every misfit manifest built at once (one process each, side by side), in a copy of the folder."""
    project = tmp_path_factory.mktemp("misfits")
    for path in MISFITS.iterdir():
        if path.suffix in (".toml", ".py"):
            shutil.copy(path, project / path.name)
    sys.path.insert(0, str(project))
    try:
        import misfitmodels

        misfitmodels.save_conv_weights(project / "conv.pt")
    finally:
        sys.path.remove(str(project))
        sys.modules.pop("misfitmodels", None)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}

    def start(case: Path) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "ptebuild", "build", case.name, "--cache", str(project / "cache"), "--out", f"out-{case.stem}"],
            cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    def finish(process: subprocess.Popen) -> subprocess.CompletedProcess:
        stdout, stderr = process.communicate(timeout=600)
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)

    # The first alone (it may probe this machine and start the warm server), the others side by side.
    done = {CASES[0].name: finish(start(CASES[0]))}
    running = {case.name: start(case) for case in CASES[1:]}
    done.update((name, finish(process)) for name, process in running.items())
    return done


def test_there_are_misfits():
    assert len(CASES) >= 8


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_misfit_is_a_located_manifest_error(case: Path, built):
    expected = case.read_text().splitlines()[0].removeprefix("# expect: ").format(file=case.name)
    done = built[case.name]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == 2, done.stderr
    assert len(errors) == 1, done.stderr
    line = errors[0].removeprefix("error: ")
    assert line.split(" (full output: ")[0] == expected
    assert "Traceback" not in done.stderr
