"""ptebuild's own code in keys: the import closure of entry modules, memoised, and what changed in it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ptebuild import own_code
from ptebuild.builder import keys

ENTRIES = ("ptebuild.worker.execute", "ptebuild.models.factory", "ptebuild.backends.xnnpack")


class DictMemo:
    """The cache front end's memo, in a dict (what a build's local cache keeps)."""

    def __init__(self) -> None:
        self.documents: dict[str, dict] = {}
        self.gets = 0

    def memo_get(self, key: str) -> dict | None:
        self.gets += 1
        return self.documents.get(key)

    def memo_put(self, key: str, document: dict) -> None:
        self.documents[key] = document


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A copy of ptebuild's package folder, free to edit (as an editable install is)."""
    copy = tmp_path / "src" / "ptebuild"
    shutil.copytree(own_code.ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_an_edit_deep_in_the_closure_changes_the_digest_and_is_named(package):
    memo = DictMemo()
    before = own_code.closure_digest(ENTRIES, memo=memo, root=package, explained=True)
    # runtime/keys.py sets the weight-key format of every .pte/.ptd; no list ever named it
    keys_module = package / "runtime" / "keys.py"
    keys_module.write_text(keys_module.read_text() + "\n# an edit\n")
    after = own_code.closure_digest(ENTRIES, memo=memo, root=package, explained=True)
    assert after != before
    assert own_code.changed_files(before, after, memo) == ["runtime/keys.py"]
    old, new = {"toolchain.ptebuild-code": before}, {"toolchain.ptebuild-code": after}
    assert keys.explain_changes(old, new, memo=memo) == ["ptebuild's lowering code changed: ptebuild/runtime/keys.py"]


def test_a_module_newly_imported_inside_a_function_joins_the_closure(package):
    memo = DictMemo()
    (package / "lowering" / "newpass.py").write_text("FACTOR = 1\n")
    before = own_code.closure_digest(ENTRIES, memo=memo, root=package, explained=True)
    assert package / "lowering" / "newpass.py" not in own_code.closure_files(ENTRIES, root=package)
    checkpoints = package / "models" / "factory" / "checkpoints.py"
    checkpoints.write_text(checkpoints.read_text() + "\n\ndef _factor():\n    from ptebuild.lowering.newpass import FACTOR\n"
                           "    return FACTOR\n")
    assert package / "lowering" / "newpass.py" in own_code.closure_files(ENTRIES, root=package)
    middle = own_code.closure_digest(ENTRIES, memo=memo, root=package, explained=True)
    (package / "lowering" / "newpass.py").write_text("FACTOR = 2\n")
    after = own_code.closure_digest(ENTRIES, memo=memo, root=package, explained=True)
    assert len({before, middle, after}) == 3
    assert own_code.changed_files(before, middle, memo) == ["lowering/newpass.py", "models/factory/checkpoints.py"]
    assert own_code.changed_files(middle, after, memo) == ["lowering/newpass.py"]


def test_code_outside_the_closure_keeps_the_digest(package):
    before = own_code.closure_digest(ENTRIES, root=package)
    for outside in ("cli/build.py", "release/pack.py", "builder/timings.py"):
        path = package / outside
        path.write_text(path.read_text() + "\n# reporting, not lowering\n")
    assert own_code.closure_digest(ENTRIES, root=package) == before


def test_the_closure_is_parsed_once_per_version_of_the_code(package, monkeypatch):
    memo = DictMemo()
    first = own_code.closure_files(ENTRIES, memo=memo, root=package)
    own_code._graphs.clear()  # a new process: only the memo remains
    from ptebuild import import_closure

    monkeypatch.setattr(import_closure, "import_graph", lambda modules: pytest.fail("parsed again"))
    assert own_code.closure_files(ENTRIES, memo=memo, root=package) == first


def test_changed_files_unknown_without_both_breakdowns():
    assert own_code.changed_files("a", "b", DictMemo()) is None
    assert own_code.changed_files("a", "b", None) is None
