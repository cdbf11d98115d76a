"""pytest-xdist plugin of ptebuild's tests: whole groups of test modules go to one worker.

The default run (``-n auto --dist loadfile`` in ``pyproject.toml``) spreads test modules over
the workers. Some modules share an expensive session fixture (the chat LLM build takes ~2
minutes), and plain ``loadfile`` would send them to several workers, each building it again. So:

- A group is a test module with its module fixtures, joined with every other module that uses
  one of our session fixtures (one defined in a ``conftest.py``, not one of pytest's own) or
  names the same ``xdist_group`` mark (the Ray modules: one cluster at a time). Modules of no
  group are a group of their own.
- Each worker, once it has collected, writes the groups it found as JSON, ``{"<module nodeid>":
  "<group>"}`` (a group is named after a module, ``fixture:<name>`` or ``group:<name>``), to the
  file named by ``$PTEBUILD_TEST_GROUPS`` (written whole, then renamed: the workers collect the
  same tests, so whichever writes last writes the same groups). The controller picks that file's
  path in a folder of its own (removed at the end) before the workers start; they inherit it.
- The controller's scheduler (``--dist loadfile`` only) is xdist's ``LoadScopeScheduling`` with a
  group as the scope: scheduling starts once every worker has collected, so the file is complete.
  (xdist's own ``--dist loadgroup`` is broken under pytest 9.2, and it knows no fixtures.)
- ``-n auto`` is one worker per core, at most 4, one per 6 GiB of memory.

``tests/conftest.py`` loads the plugin by importing its hooks (``__all__``) into its own
namespace: ``-n auto`` is resolved before any plugin a conftest could register later. xdist's own
hooks are optional, so a run without xdist (``-p no:xdist``) works. ``tests/test_xdist_groups.py`` runs a small suite with them, and without them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

__all__ = [
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_unconfigure",
    "pytest_xdist_auto_num_workers",
    "pytest_xdist_make_scheduler",
]

GROUPS_ENV = "PTEBUILD_TEST_GROUPS"
_FOLDER = pytest.StashKey[str]()


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _groups_wanted(config: pytest.Config) -> bool:
    """The controller of a ``--dist loadfile`` run (xdist has settled ``dist`` before configure)."""
    return not _is_worker(config) and getattr(config.option, "dist", "no") == "loadfile"


@pytest.hookimpl(optionalhook=True)  # xdist's hook: a run without xdist (-p no:xdist) skips it
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core, at most 4, and one per 6 GiB of memory (a worker's builds
    take up to ~5 GiB: two lowering processes and the warm server)."""
    try:
        memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        memory_gib = 12.0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, 4, int(memory_gib // 6)))


def pytest_configure(config: pytest.Config) -> None:
    """The controller names the groups file in a folder of its own; the workers it starts inherit it."""
    if not _groups_wanted(config):
        return
    folder = tempfile.mkdtemp(prefix="ptebuild-test-groups-")
    config.stash[_FOLDER] = folder
    os.environ[GROUPS_ENV] = os.path.join(folder, "test-groups.json")


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_FOLDER, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A worker writes the groups of the tests it collected (the module's docstring says which)."""
    target = os.environ.get(GROUPS_ENV)
    if not _is_worker(config) or not target:
        return
    parent: dict[str, str] = {}

    def find(name: str) -> str:
        while parent.setdefault(name, name) != name:
            name = parent[name]
        return name

    for item in items:
        module = item.nodeid.split("::", 1)[0]
        find(module)
        for name, definitions in item._fixtureinfo.name2fixturedefs.items():
            # Ours only: pytest's own session fixtures (tmp_path_factory, ...) have no baseid.
            if any(d.scope == "session" and d.baseid and d.baseid != module for d in definitions):
                parent[find(module)] = find(f"fixture:{name}")
        for mark in item.iter_markers("xdist_group"):
            parent[find(module)] = find(f"group:{mark.args[0] if mark.args else mark.kwargs['name']}")
    groups = {module: find(module) for module in {item.nodeid.split("::", 1)[0] for item in items}}
    partial = f"{target}.{os.getpid()}"
    Path(partial).write_text(json.dumps(groups))
    os.replace(partial, target)


@pytest.hookimpl(optionalhook=True)  # xdist's hook: a run without xdist (-p no:xdist) skips it
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile``, with the groups the workers found: whole groups go to one worker."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if self.groups is None:  # scheduling starts once every worker has collected
                with contextlib.suppress(OSError, ValueError, KeyError):
                    self.groups = json.loads(Path(os.environ[GROUPS_ENV]).read_text())
            return (self.groups or {}).get(module, module)

    return GroupScheduling(config, log)
