"""The import closure, read from the source: what a module can run, found without a list."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptebuild import import_closure


def write_package(root: Path, files: dict[str, str]) -> Path:
    package = root / "ptebuild"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


@pytest.fixture
def package(tmp_path: Path) -> Path:
    return write_package(tmp_path, {
        "__init__.py": "",
        "top.py": "import os\nfrom ptebuild.deep import reached\n",
        "deep/__init__.py": "",
        "deep/reached.py": "def f():\n    from . import inside  # a function's import\n    return inside\n",
        "deep/inside.py": "from ..registry import KINDS\n",
        "registry.py": 'KINDS = {"a": "ptebuild.kinds.alpha", "b": "ptebuild.kinds.beta:KIND"}\n',
        "kinds/__init__.py": "",
        "kinds/alpha.py": "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from ptebuild import typed_only\nelse:\n    import ptebuild.runs\n",
        "kinds/beta.py": "",
        "typed_only.py": "",
        "runs.py": "",
        "apart.py": "import ptebuild.top\n",
    })


def test_closure_follows_imports_at_any_depth_relative_ones_and_registrations(package):
    modules = import_closure.module_files(package)
    graph = import_closure.import_graph(modules)
    reached = import_closure.closure(["ptebuild.top"], graph)
    assert set(reached) == {
        "ptebuild", "ptebuild.top", "ptebuild.deep", "ptebuild.deep.reached", "ptebuild.deep.inside",
        "ptebuild.registry", "ptebuild.kinds", "ptebuild.kinds.alpha", "ptebuild.kinds.beta", "ptebuild.runs",
    }
    assert reached["ptebuild.deep.inside"] == "ptebuild.deep.reached"  # who first imports it
    assert reached["ptebuild.kinds.beta"] == "ptebuild.registry"  # a registration's 'module:attribute'


def test_what_type_checking_names_and_importers_are_left_out(package):
    graph = import_closure.import_graph(import_closure.module_files(package))
    reached = import_closure.closure(["ptebuild.top"], graph)
    assert "ptebuild.typed_only" not in reached  # never runs
    assert "ptebuild.apart" not in reached  # imports the entry, is not imported by it


def test_an_unknown_entry_is_an_error_not_an_empty_closure(package):
    graph = import_closure.import_graph(import_closure.module_files(package))
    with pytest.raises(KeyError):
        import_closure.closure(["ptebuild.nothere"], graph)


def test_a_name_that_is_no_module_is_no_edge():
    named = import_closure.named_modules(b"from ptebuild.errors import BuildError\nimport torch\n", "ptebuild.x", False)
    assert import_closure.edges(named, {"ptebuild", "ptebuild.errors"}) == {"ptebuild", "ptebuild.errors"}


def test_ptebuild_modules_the_worker_imports_lazily_are_in_its_closure():
    """The registries' modules are found by name: every model kind and ptebuild's own backends."""
    from ptebuild import own_code
    from ptebuild.backends import BUILTIN_BACKENDS
    from ptebuild.models import MODEL_KIND_MODULES

    modules = import_closure.module_files(own_code.ROOT)
    reached = import_closure.closure(["ptebuild.worker.execute"], import_closure.import_graph(modules))
    assert set(MODEL_KIND_MODULES.values()) <= set(reached)
    assert set(BUILTIN_BACKENDS.values()) <= set(reached)
    for deep in ("ptebuild.runtime.keys", "ptebuild.models.factory.checkpoints", "ptebuild.models.executorch_llm.generation"):
        assert deep in reached


def test_a_lazy_export_is_an_edge_to_the_module_defining_it(tmp_path):
    package = write_package(tmp_path, {
        "__init__.py": '_EXPORTS = {"build": "api.build"}\n__getattr__ = lazy_exports(__name__, _EXPORTS)\n',
        "api/__init__.py": "",
        "api/build.py": "",
        "runtime/__init__.py": '_EXPORTS = {"load": "loader", "plan": "..plan"}\n__getattr__ = lazy_exports(__name__, _EXPORTS)\n',
        "runtime/loader.py": "",
        "plan.py": "",
        "user.py": "from ptebuild.runtime import load\nfrom .runtime import plan\n",
        "other.py": "import ptebuild.runtime\n",
    })
    graph = import_closure.import_graph(import_closure.module_files(package))
    assert set(import_closure.closure(["ptebuild.user"], graph)) == {
        "ptebuild", "ptebuild.user", "ptebuild.runtime", "ptebuild.runtime.loader", "ptebuild.plan"}
    # the package alone runs none of its lazy exports' modules (ptebuild's face would be all of it)
    assert set(import_closure.closure(["ptebuild.other"], graph)) == {"ptebuild", "ptebuild.other", "ptebuild.runtime"}
