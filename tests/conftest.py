"""Fixtures shared by ptebuild's own tests, and the environment every test's ptebuild runs in.

- Real components (nginx, Ray, LLVM, MinGW) are required under CI: a test that cannot find one
  fails there instead of skipping (:func:`helpers.unavailable`). ``$CI`` is read here, then removed,
  so that the ptebuild under test behaves as on a developer's machine.
- The default executor is the one tested: builds lower on the warm worker server (the Linux
  default), one per toolchain for the whole session (``$PTEBUILD_WORKERS_DIR``), stopped at the
  end. Tests of an executor of their own say so (``--executor local``, ``--no-daemon``); the warm
  server's own tests use a server per cache folder (``tests/executors/conftest.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from project_copy import copy_project

if os.environ.pop("CI", "").lower() not in ("", "0", "false"):
    os.environ["PTEBUILD_TESTS_REQUIRE_ALL"] = "1"
# pytest-xdist's workers inherit the controller's environment: each takes folders of its own, so
# that the first to finish does not stop the warm servers another is still building on.
_XDIST_WORKER = bool(os.environ.get("PYTEST_XDIST_WORKER"))
_WORKERS = tempfile.mkdtemp(prefix="ptebuild-test-workers-")
_CAPABILITIES = tempfile.mkdtemp(prefix="ptebuild-test-capabilities-")
if _XDIST_WORKER:
    os.environ["PTEBUILD_WORKERS_DIR"] = _WORKERS
    os.environ["PTEBUILD_CAPABILITIES_DIR"] = _CAPABILITIES
os.environ.setdefault("PTEBUILD_WORKERS_DIR", _WORKERS)
os.environ.setdefault("PTEBUILD_DAEMON_IDLE", "900")
# One capability probe per toolchain for the whole session, whatever cache folder a test uses.
os.environ.setdefault("PTEBUILD_CAPABILITIES_DIR", _CAPABILITIES)


@pytest.hookimpl(optionalhook=True)  # xdist's hook: a run without xdist (-p no:xdist) skips it
def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: one worker per core, at most 4, and one per 6 GiB of memory (a worker's builds
    take up to ~5 GiB: two lowering processes and the warm server)."""
    try:
        memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        memory_gib = 12.0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, 4, int(memory_gib // 6)))


# The test groups a worker found (module -> group), read by the controller's scheduler below.
if not _XDIST_WORKER:
    os.environ["PTEBUILD_TEST_GROUPS"] = os.path.join(_WORKERS, "test-groups.json")


def pytest_collection_modifyitems(config, items) -> None:
    """Under pytest-xdist, a worker takes whole groups of tests: a test module with its module
    fixtures, joined with every other module that shares one of its session fixtures (the chat
    build, the mobile build, ...) or names the same ``xdist_group`` (the Ray modules: one cluster
    at a time). So no expensive fixture is built twice. Each worker writes the groups it found for
    the controller's scheduler (:func:`pytest_xdist_make_scheduler`)."""
    target = os.environ.get("PTEBUILD_TEST_GROUPS")
    if not _XDIST_WORKER or not target:
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
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile``, with the groups the workers found: whole groups go to one worker."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if self.groups is None:  # scheduling starts once every worker has collected
                with contextlib.suppress(OSError, ValueError):
                    self.groups = json.loads(Path(os.environ["PTEBUILD_TEST_GROUPS"]).read_text())
            return (self.groups or {}).get(module, module)

    return GroupScheduling(config, log)


def pytest_sessionfinish(session, exitstatus) -> None:
    """Stop the session's warm servers and remove their folder."""
    for pid_file in Path(_WORKERS).glob("*.pid"):
        try:
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
        except (OSError, ValueError):
            pass
    shutil.rmtree(_WORKERS, ignore_errors=True)
    shutil.rmtree(_CAPABILITIES, ignore_errors=True)

if TYPE_CHECKING:
    from runtime_programs import Programs


@pytest.fixture
def tiny_project(tmp_path: Path) -> Path:
    """A private copy of the tiny project, free to edit: returns the manifest path."""
    return copy_project(tmp_path / "project")


@pytest.fixture(scope="session")
def programs(tmp_path_factory: pytest.TempPathFactory) -> Programs:
    """The tiny programs of :mod:`runtime_programs`, exported once (for tests/runtime and tests/lowering)."""
    from runtime_programs import build_all  # imports torch: only for the tests that ask

    return build_all(tmp_path_factory.mktemp("built"))


@pytest.fixture(scope="session")
def people_build(tmp_path_factory: pytest.TempPathFactory):
    """``tests/manifests/people.toml`` (nested state, dicts, scalars, and three failing models)
    built once with ``--keep-going``: ``(project folder, exit code, JSON report, stderr)``."""
    import json

    from helpers import ptebuild

    root = tmp_path_factory.mktemp("people")
    project = root / "project"
    project.mkdir()
    manifests = Path(__file__).resolve().parent / "manifests"
    shutil.copy(manifests / "people.toml", project / "people.toml")
    shutil.copytree(manifests / "peoplemodels", project / "peoplemodels", ignore=shutil.ignore_patterns("__pycache__"))
    done = ptebuild("build", project / "people.toml", "--cache", root / "cache", "--keep-going", "--json")
    try:
        document = json.loads(done.stdout)
    except ValueError:
        raise AssertionError(f"no JSON (exit {done.returncode}):\n{done.stdout}\n{done.stderr}") from None
    return project, done.returncode, document, done.stderr


@pytest.fixture(scope="session")
def mobile_build(tmp_path_factory: pytest.TempPathFactory):
    """The Core ML and Vulkan programs of :mod:`mobile_programs`, built once (warm server, own cache)."""
    from mobile_programs import build

    return build(tmp_path_factory.mktemp("mobile"))


@pytest.fixture(scope="session")
def mobile_rebuild(tmp_path_factory: pytest.TempPathFactory):
    """The same project built again from nothing: another folder, no cache, worker processes of the
    build instead of the warm server, another hash seed (tests of reproducible bytes)."""
    from mobile_programs import build

    return build(tmp_path_factory.mktemp("mobile-again"), "--no-cache", "--no-daemon", env={"PYTHONHASHSEED": "4242"})


@pytest.fixture(scope="session")
def chat_build(tmp_path_factory: pytest.TempPathFactory):
    """``manifests/chat.toml`` (the tiny LLM: float and 8da4w XNNPACK programs, a LoRA pair) built once, on the
    warm server, into a cache of its own: ``(manifest, out folder, cache, exit code, JSON report, stderr)``."""
    import json

    from helpers import ptebuild
    from project_copy import copy_chat_project

    root = tmp_path_factory.mktemp("chat")
    manifest = copy_chat_project(root / "project")
    done = ptebuild("build", manifest, "--cache", root / "cache", "--json", "-j2")
    try:
        document = json.loads(done.stdout)
    except ValueError:
        raise AssertionError(f"no JSON (exit {done.returncode}):\n{done.stdout}\n{done.stderr}") from None
    return manifest, root / "out" / "chat", root / "cache", done.returncode, document, done.stderr
