"""A task's failure is one value from every executor: the same bad manifest, the same lines.

One manifest with three broken programs (weights that are not a state dict: located at
``models.broken.weights``; a forward that raises: at the program; a factory module that does not
import: a complete manifest line) is built with ``--keep-going`` by the local pool, the warm
server and Ray; each prints the same error lines.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from project_copy import copy_project

# One Ray cluster at a time on this machine: under pytest-xdist, the Ray modules run on one worker.
pytestmark = pytest.mark.xdist_group("ray")

ROOT = Path(__file__).resolve().parents[2]

BROKEN = """
[models.broken]
factory = "tinymodels.tiny:make_tiny"
weights = "weights/not-a-state-dict.pt"
[models.broken.methods.forward]
inputs = [{ name = "x", shape = [2, 6] }]

[models.raising]
factory = "tinymodels.raising:make"
[models.raising.methods.forward]
inputs = [{ name = "x", shape = [2, 6] }]

[models.unimportable]
factory = "tinymodels.unimportable:make"
[models.unimportable.methods.forward]
inputs = [{ name = "x", shape = [2, 6] }]

[programs.bad_weights]
model = "broken"
backend = "portable"

[programs.bad_forward]
model = "raising"
backend = "portable"

[programs.bad_import]
model = "unimportable"
backend = "portable"
"""


def broken_project(folder: Path) -> Path:
    manifest = copy_project(folder)
    manifest.write_text('[defaults]\nout = "out"\n' + BROKEN)
    (folder / "weights").mkdir()
    (folder / "weights" / "not-a-state-dict.pt").write_bytes(b"these are not the weights you are looking for")
    (folder / "tinymodels" / "raising.py").write_text(
        "import torch\n\n\nclass Raising(torch.nn.Module):\n"
        "    def forward(self, x):\n        raise ValueError('the model refuses')\n\n\n"
        "def make():\n    return Raising()\n"
    )
    (folder / "tinymodels" / "unimportable.py").write_text("import a_module_that_does_not_exist\n")
    return manifest


def error_lines(manifest: Path, executor: str, cache: Path) -> tuple[int, list[str]]:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PTEBUILD_DAEMON_IDLE": "60"}
    done = subprocess.run(
        [sys.executable, "-m", "ptebuild", "build", str(manifest), "--keep-going", "--executor", executor,
         "--cache", str(cache), "--jobs", "2"],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env=env,
    )
    return done.returncode, sorted(line for line in done.stderr.splitlines() if line.startswith("error: "))


def stop_servers(cache: Path) -> None:
    for pid_file in (cache / "workers").glob("*.pid"):
        try:
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
        except (OSError, ValueError):
            pass


@pytest.fixture(scope="module")
def local_lines(tmp_path_factory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("failures")
    manifest = broken_project(root / "project")
    code, lines = error_lines(manifest, "local", root / "cache-local")
    assert code == 2, lines  # a manifest error among them: exit 2
    return manifest, lines


def test_the_local_pool_names_each_cause_where_it_is(local_lines):
    manifest, lines = local_lines
    assert len(lines) == 3, lines
    weights, forward, imports = (next(line for line in lines if key in line)
                                 for key in ("models.broken.weights", "bad_forward", "bad_import"))
    assert weights.startswith(f"error: {manifest}: models.broken.weights: cannot load 'weights/not-a-state-dict.pt' "
                              "as a state dict: "), weights
    assert re.match(rf"error: {re.escape(str(manifest))}: programs\.bad_forward: .*the model refuses", forward), forward
    assert imports.startswith(f"error: {manifest}: programs.bad_import: cannot import factory "
                              "'tinymodels.unimportable:make' of model 'unimportable': ModuleNotFoundError"), imports


# Ray's case is slow (20 s, a local Ray cluster started by the build): "daemon" is its fast sibling.
@pytest.mark.parametrize("executor", ["daemon", pytest.param("ray", marks=pytest.mark.slow)])
def test_every_executor_gives_the_same_lines(local_lines, tmp_path, executor):
    manifest, expected = local_lines
    cache = tmp_path / "cache"
    try:
        code, lines = error_lines(manifest, executor, cache)
    finally:
        stop_servers(cache)
    assert code == 2
    assert lines == expected
