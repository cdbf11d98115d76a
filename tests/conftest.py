"""Fixtures shared by ptebuild's own tests, and the environment every test's ptebuild runs in.

- Real components (nginx, Ray, LLVM, MinGW) are required under CI: a test that cannot find one
  fails there instead of skipping (:func:`helpers.unavailable`). ``$CI`` is read here, then removed,
  so that the ptebuild under test behaves as on a developer's machine.
- The default executor is the one tested: builds lower on the warm worker server (the Linux
  default), one per toolchain for the whole session (``$PTEBUILD_WORKERS_DIR``), stopped at the
  end. Tests of an executor of their own say so (``--executor local``, ``--no-daemon``); the warm
  server's own tests use a server per cache folder (``tests/executors/conftest.py``).
- Under pytest-xdist, a worker takes whole groups of modules (those sharing a session fixture
  below or an ``xdist_group`` mark): the hooks of :mod:`xdist_groups`, imported here.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from project_copy import copy_project

# Whole groups of test modules per pytest-xdist worker, so that no shared build is made twice.
from xdist_groups import (  # noqa: F401 (hooks: pytest finds them in this conftest's namespace)
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_unconfigure,
    pytest_xdist_auto_num_workers,
    pytest_xdist_make_scheduler,
)

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
def run_cli(capsys):
    """Run ``ptebuild`` in this process through :func:`ptebuild.cli.main`: ``run(*argv)`` returns
    (exit code, stdout, stderr), and no traceback may reach stderr."""
    from ptebuild import cli

    def run(*argv) -> tuple[int, str, str]:
        code = cli.main([str(a) for a in argv])
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        return code, out, err

    return run


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
