"""The xdist grouping of :mod:`xdist_groups`: a shared session fixture is built once, grouped modules
run on one worker, and a run without xdist still loads ``tests/conftest.py``.

The grouping is tested on a small suite written to ``tmp_path/suite/tests``, run by a pytest of its
own with two workers (``-n 2 --dist loadfile``), as ``pyproject.toml`` runs ours. Its files, in
collection order:

- ``test_a_build.py``, ``test_b_build.py`` (two tests each) and ``test_f_build.py``: the session
  fixture ``build`` of the suite's conftest, which appends a line to ``builds.txt`` when it is built;
- ``test_c_cluster.py``, ``test_d_cluster.py``: one test each, ``xdist_group("cluster")``;
- ``test_e_alone.py``: neither.

xdist's scope scheduler (``LoadScopeScheduling``) hands the scopes out largest first, else in
collection order: one per worker, then one more to each worker left with at most 2 tests pending. So without the grouping
(scope = file) the two workers start with a, c and b, d: the fixture is built twice and the cluster
pair split, every time. With it, one worker takes the build group (5 tests) and the other the
cluster group (2 tests) and then the lone module.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import xdist_groups
from helpers import ROOT

TESTS = Path(__file__).resolve().parent

HOOKS = "from xdist_groups import *  # noqa: F403\n"

CONFTEST = """\
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, {tests!r})
{hooks}

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def build():
    with open(HERE / "builds.txt", "a") as out:
        out.write(f"{{os.environ.get('PYTEST_XDIST_WORKER')}} {{os.getpid()}}\\n")


@pytest.fixture(autouse=True)
def where(request):
    with open(HERE / "ran.txt", "a") as out:
        out.write(f"{{request.node.nodeid}} {{os.environ.get('PYTEST_XDIST_WORKER')}}\\n")
"""

BUILD = "def test_one(build):\n    pass\n\n\ndef test_two(build):\n    pass\n"
CLUSTER = 'import pytest\n\npytestmark = pytest.mark.xdist_group("cluster")\n\n\ndef test_one():\n    pass\n'
SUITE = {
    "test_a_build.py": BUILD,
    "test_b_build.py": BUILD,
    "test_c_cluster.py": CLUSTER,
    "test_d_cluster.py": CLUSTER,
    "test_e_alone.py": "def test_one():\n    pass\n",
    "test_f_build.py": "def test_one(build):\n    pass\n",
}


def clean_environment() -> dict[str, str]:
    """This run's environment without what makes a pytest one of its xdist workers or adds options,
    and no plugins but those named (``-p``): the installed ones (hydra's, ...) take ~3 s to load."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("CI", "PTEBUILD_TESTS_REQUIRE_ALL", xdist_groups.GROUPS_ENV, "PYTEST_ADDOPTS")
             and not k.startswith("PYTEST_XDIST")}
    return {**clean, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def run_suite(folder: Path, hooks: str) -> tuple[list[str], dict[str, str], str]:
    """Write the suite (its conftest loading the plugin with ``hooks``), run it on two workers:
    ``(the lines of builds.txt, module -> its worker, pytest's output)``."""
    # In a subfolder, as ours are: the plugin tells a conftest's session fixtures from pytest's
    # own by the folder they belong to (pytest's have none, nor would a conftest at the rootdir).
    (folder / "tests").mkdir(parents=True)
    (folder / "pytest.ini").write_text("[pytest]\n")
    (folder / "tests" / "conftest.py").write_text(CONFTEST.format(tests=str(TESTS), hooks=hooks))
    for name, text in SUITE.items():
        (folder / "tests" / name).write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "xdist", "-p", "no:cacheprovider", "-o", "addopts=",
         "-n", "2", "--dist", "loadfile", "tests"],
        capture_output=True, text=True, cwd=folder, env=clean_environment(), timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "8 passed" in done.stdout, output[-3000:]
    workers: dict[str, set[str]] = {}
    for line in (folder / "tests" / "ran.txt").read_text().splitlines():
        nodeid, worker = line.split()
        workers.setdefault(nodeid.split("::")[0].removeprefix("tests/"), set()).add(worker)
    assert all(len(ran_on) == 1 for ran_on in workers.values()), workers  # loadfile: a module stays on one worker
    return (folder / "tests" / "builds.txt").read_text().splitlines(), {m: w.pop() for m, w in workers.items()}, output


def test_modules_sharing_a_session_fixture_or_a_group_mark_run_on_one_worker(tmp_path):
    builds, worker, output = run_suite(tmp_path / "suite", HOOKS)
    assert len(builds) == 1, f"the session fixture was built {len(builds)} times: {builds}\n{output}"
    assert worker["test_a_build.py"] == worker["test_b_build.py"] == worker["test_f_build.py"] == builds[0].split()[0], worker
    assert worker["test_c_cluster.py"] == worker["test_d_cluster.py"], worker
    # A module of no group is a group of its own: here it went to the worker that had less to do.
    assert worker["test_e_alone.py"] != worker["test_a_build.py"], worker
    assert len(set(worker.values())) == 2, worker


def test_without_the_hooks_the_suite_builds_its_session_fixture_twice(tmp_path):
    """The control: the same suite under plain ``--dist loadfile`` (what the test above guards against)."""
    builds, worker, _ = run_suite(tmp_path / "suite", "")
    assert len(builds) == 2, builds
    assert worker["test_a_build.py"] != worker["test_b_build.py"], worker
    assert worker["test_c_cluster.py"] != worker["test_d_cluster.py"], worker


def test_the_conftest_registers_every_hook_of_the_plugin(request):
    """``tests/conftest.py`` imports the plugin's hooks by name: one left out would not run."""
    manager = request.config.pluginmanager
    for name in xdist_groups.__all__:
        registered = [impl.function for impl in getattr(manager.hook, name).get_hookimpls()]
        assert getattr(xdist_groups, name) in registered, f"{name} is not registered: {registered}"


def test_auto_is_one_worker_per_core_at_most_four(request):
    workers = xdist_groups.pytest_xdist_auto_num_workers(request.config)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert 1 <= workers <= min(4, cores or 1)


def test_a_run_without_xdist_loads_the_conftest():
    """``-p no:xdist``: xdist's hooks are optional, so the conftest that implements them still loads
    (and registers them all: the test it runs)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
         "-o", "addopts=--import-mode=importlib", f"{__file__}::test_the_conftest_registers_every_hook_of_the_plugin"],
        capture_output=True, text=True, cwd=ROOT, env=clean_environment(), timeout=120,
    )
    assert done.returncode == 0 and "1 passed" in done.stdout, (done.stdout + done.stderr)[-3000:]
