"""``ptebuild lock`` and ``ptebuild build --locked`` on real tiny builds (Cargo's --locked as the model)."""

from __future__ import annotations

import json

import pytest
from helpers import ptebuild
from project_copy import copy_project
from tinymodels_for_weights import save_weights


@pytest.fixture
def locked_project(tmp_path):
    """The tiny project with a weights file, built and locked (portable program only)."""
    manifest = copy_project(tmp_path / "project")
    save_weights(manifest.parent / "weights.pt", width=16, seed=3)
    text = manifest.read_text().replace("seed = 1", 'seed = 1\nweights = "weights.pt"')
    manifest.write_text(text.split("[programs.tiny_xnnpack]")[0])
    cache = str(tmp_path / "cache")
    locked = ptebuild("lock", str(manifest), "--cache", cache)
    assert locked.returncode == 0, locked.stderr
    assert (manifest.parent / "ptebuild.lock").is_file()
    return manifest, cache


def test_locked_build_passes_with_a_fresh_lock(locked_project):
    manifest, cache = locked_project
    result = ptebuild("build", str(manifest), "--cache", cache, "--locked", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["lock_problems"] == []


def test_locked_fails_on_a_changed_weight_naming_target_and_file(locked_project):
    manifest, cache = locked_project
    save_weights(manifest.parent / "weights.pt", width=16, seed=4)
    result = ptebuild("build", str(manifest), "--cache", cache, "--locked")
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: --locked:")]
    assert len(errors) == 1, result.stderr
    assert "tiny_portable" in errors[0] and "weights.pt" in errors[0], errors[0]
    assert "lowering" not in result.stderr  # refused before anything was built


def test_locked_fails_when_there_is_no_lock(tiny_project, tmp_path):
    result = ptebuild("build", str(tiny_project), "--cache", str(tmp_path / "cache"), "--locked", "--only", "tiny_portable")
    assert result.returncode == 1
    assert "error: --locked:" in result.stderr and "ptebuild lock" in result.stderr, result.stderr
    assert "lowering" not in result.stderr


def test_locked_fails_when_a_built_output_differs_from_the_lock(locked_project):
    """A reproducibility regression: same inputs, other bytes."""
    manifest, cache = locked_project
    lock = manifest.parent / "ptebuild.lock"
    record = json.loads((manifest.parent / "out" / "ptebuild.json").read_text())
    digest = record["targets"]["tiny_portable"]["outputs"]["tiny_portable.pte"]["sha256"]
    lock.write_text(lock.read_text().replace(digest, "0" * 64))
    result = ptebuild("build", str(manifest), "--cache", cache, "--locked")
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: --locked:")]
    assert len(errors) == 1 and "tiny_portable" in errors[0] and "tiny_portable.pte" in errors[0], result.stderr


def _as_written_on(lock_path, platform: str, key: str) -> None:
    """The lock as another machine wrote it: its platform fact and the key it gave."""
    import tomllib

    import tomli_w

    document = tomllib.loads(lock_path.read_text())
    for target in document["targets"].values():
        if "toolchain" in target:
            target["toolchain"]["platform"] = platform
            target["key"] = key
    lock_path.write_text(tomli_w.dumps(document))


def test_a_lock_written_on_another_platform_holds_for_programs_whose_bytes_do_not_depend_on_it(locked_project):
    """A developer's lock from macOS checked on Linux CI: portable bytes do not depend on the
    platform, so the lock holds; a real change still fails it."""
    manifest, cache = locked_project
    lock = manifest.parent / "ptebuild.lock"
    _as_written_on(lock, "darwin-arm64", "f" * 32)
    result = ptebuild("build", str(manifest), "--cache", cache, "--locked", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["lock_problems"] == []

    save_weights(manifest.parent / "weights.pt", width=16, seed=4)
    result = ptebuild("build", str(manifest), "--cache", cache, "--locked")
    assert result.returncode == 1
    assert "weights.pt" in result.stderr and "platform" not in result.stderr, result.stderr
