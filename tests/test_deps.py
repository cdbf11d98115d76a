"""Discovered dependencies: a cache hit is never stale when model code reaches beyond its package.

Real builds of the tiny project (one program, portable) whose model imports a sibling package
next to the manifest, and a real installed distribution (pip install --target) that is upgraded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import ptebuild
from project_copy import copy_project

from ptebuild.deps import Dependencies, DependencyCheck, discover, installed_versions, normalize
from ptebuild.hashing import hash_file


def build(manifest: Path, cache: Path, env: dict | None = None) -> dict:
    result = ptebuild("build", str(manifest), "--cache", str(cache), "--only", "tiny_portable", "--json", "--explain", env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["targets"][0]


def use_in_forward(manifest: Path, import_line: str, call: str) -> None:
    """Make the tiny model's forward call ``call`` (after ``import_line``) on its hidden layer."""
    source = manifest.parent / "tinymodels" / "tiny.py"
    text = source.read_text()
    text = text.replace("from torch import nn\n", f"from torch import nn\n{import_line}\n")
    text = text.replace("return self.head(torch.relu(self.encoder(x)))", f"return self.head({call}(self.encoder(x)))")
    source.write_text(text)


def test_sibling_package_change_rebuilds_with_an_explanation(tmp_path):
    manifest = copy_project(tmp_path / "project")
    layers = manifest.parent / "layers"
    layers.mkdir()
    (layers / "__init__.py").write_text("")
    blocks = layers / "blocks.py"
    blocks.write_text("import torch\n\n\ndef activation(x):\n    return torch.relu(x)\n")
    use_in_forward(manifest, "from layers.blocks import activation", "activation")
    cache = tmp_path / "cache"
    first = build(manifest, cache)
    assert first["status"] == "built"
    again = build(manifest, cache)
    assert again["status"] == "cached" and again["explain"] == ["up to date"]

    blocks.write_text(blocks.read_text().replace("torch.relu", "torch.tanh"))
    changed = build(manifest, cache)
    assert changed["status"] == "built"
    assert changed["explain"] == ["source file layers/blocks.py changed"]
    assert {o["sha256"] for o in changed["outputs"]} != {o["sha256"] for o in first["outputs"]}
    record = json.loads((manifest.parent / "out" / "ptebuild.json").read_text())
    assert "layers/blocks.py" in record["targets"]["tiny_portable"]["deps"]["sources"]
    assert build(manifest, cache)["status"] == "cached"


def make_distribution(root: Path, version: str, factor: float) -> Path:
    """A real, tiny distribution 'scalelib' at ``version`` (its code scales by ``factor``)."""
    project = root / f"scalelib-{version}"
    (project / "scalelib").mkdir(parents=True)
    (project / "scalelib" / "__init__.py").write_text(f"def scale(x):\n    return x * {factor}\n")
    (project / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""
            [build-system]
            requires = ["setuptools"]
            build-backend = "setuptools.build_meta"
            [project]
            name = "scalelib"
            version = "{version}"
            [tool.setuptools]
            packages = ["scalelib"]
            """
        )
    )
    return project


def pip_install(project: Path, target: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--upgrade", "--target", str(target), str(project)],
        check=True,
        capture_output=True,
    )


# Slow: a real distribution installed and upgraded (15 s); its fast siblings: the sibling package test above and test_dependency_check_names_each_difference.
@pytest.mark.slow
def test_upgraded_distribution_rebuilds_with_an_explanation(tmp_path):
    manifest = copy_project(tmp_path / "project")
    use_in_forward(manifest, "from scalelib import scale", "scale")
    site = tmp_path / "site"
    pip_install(make_distribution(tmp_path, "1.0", 2.0), site)
    env = {"PYTHONPATH": str(site)}
    cache = tmp_path / "cache"
    first = build(manifest, cache, env)
    assert first["status"] == "built"
    assert build(manifest, cache, env)["status"] == "cached"

    shutil.rmtree(site)  # as a real upgrade in an environment does, the old version goes
    pip_install(make_distribution(tmp_path, "1.1", 3.0), site)
    upgraded = build(manifest, cache, env)
    assert upgraded["status"] == "built"
    assert upgraded["explain"] == ["distribution scalelib changed (1.0 -> 1.1)"]
    assert {o["sha256"] for o in upgraded["outputs"]} != {o["sha256"] for o in first["outputs"]}


# -- the module on its own --------------------------------------------------------------------


def test_installed_versions_reads_dist_info_folder_names(tmp_path):
    (tmp_path / "Foo_Bar-1.2.3.dist-info").mkdir()
    (tmp_path / "baz-0.1.egg-info").mkdir()
    (tmp_path / "not_a_dist").mkdir()
    assert installed_versions([str(tmp_path)]) == {"foo-bar": "1.2.3", "baz": "0.1"}
    (tmp_path / "foo_bar-1.3.dist-info").mkdir()  # pip --target leaves the old one behind
    assert installed_versions([str(tmp_path)])["foo-bar"] == "1.2.3|1.3"
    assert normalize("Ruamel.Yaml") == "ruamel-yaml"


def test_discover_maps_modules_to_sources_and_distributions(tmp_path, monkeypatch):
    package = tmp_path / "helperpkg"
    package.mkdir()
    (package / "__init__.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import helperpkg  # noqa: F401

    try:
        deps = discover(tmp_path, hash_file)
    finally:
        sys.modules.pop("helperpkg", None)
    sources = dict(deps.sources)
    assert sources["helperpkg/__init__.py"] == hash_file(package / "__init__.py")[0]
    assert "pytest" in dict(deps.dists)
    assert not any(name.startswith("ptebuild") for name in sources)
    assert not any(os.path.isabs(name) for name in sources if name.startswith("helperpkg"))


def test_dependency_check_names_each_difference(tmp_path):
    (tmp_path / "a.py").write_text("A = 1\n")
    check = DependencyCheck(tmp_path, hash_file)
    deps = Dependencies(
        sources=(("a.py", hash_file(tmp_path / "a.py")[0]), ("gone.py", "0" * 64)),
        dists=(("pytest", "0.0.1"), ("no-such-dist", "1.0")),
    )
    version = installed_versions()["pytest"]
    assert check.changes(deps) == [
        "source file gone.py removed",
        f"distribution pytest changed (0.0.1 -> {version})",
        "distribution no-such-dist removed (was 1.0)",
    ]
    (tmp_path / "a.py").write_text("A = 2\n")
    fresh = DependencyCheck(tmp_path, hash_file)
    assert fresh.changes(Dependencies(sources=deps.sources[:1])) == ["source file a.py changed"]


def test_a_package_vendored_at_run_time_is_a_source_the_builder_can_find(tmp_path, monkeypatch):
    """Found in the bench on the GPU machine: pkg_resources adds setuptools' vendored packages to
    sys.path in the worker, their dist-info folders are not on the builder's path, and every
    build read as 'distribution jaraco-context removed'. Named from the start-up path instead."""
    site = tmp_path / "site"
    (site / "host-1.0.dist-info").mkdir(parents=True)
    (site / "host-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: host\nVersion: 1.0\n")
    (site / "host-1.0.dist-info" / "top_level.txt").write_text("host\n")
    vendor = site / "host" / "_vendor"
    (vendor / "vendmod-2.0.dist-info").mkdir(parents=True)
    (vendor / "vendmod-2.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: vendmod\nVersion: 2.0\n")
    (vendor / "vendmod").mkdir()
    (vendor / "vendmod" / "__init__.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(vendor))  # what the vendoring package does at import time
    import vendmod  # noqa: F401

    try:
        deps = discover(tmp_path / "project", hash_file, path=[str(site)])
    finally:
        sys.modules.pop("vendmod", None)
    assert "vendmod" not in dict(deps.dists)
    assert "host/_vendor/vendmod/__init__.py" in dict(deps.sources)
    assert DependencyCheck(tmp_path / "project", hash_file, path=[str(site)]).changes(deps) == []
