"""Installs the demo backend (``tests/plugins/ptebuild_demo_backend``) into a folder, as ``pip
install --target`` lays a distribution out: its package, and a ``.dist-info`` with the metadata
and the entry points its ``pyproject.toml`` declares (read from there), a ``RECORD`` and an
``INSTALLER``. On ``PYTHONPATH``, :func:`importlib.metadata.entry_points` finds it as it finds any
installed distribution. Written without a build backend: in milliseconds, the same with any
setuptools (a worktree's own venv may hold one too old to build a wheel)."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
"""``tests/plugins``: the plug-in packages (``ptebuild_demo_backend``, ``ptebuild_broken_backend``)."""


def plugin_env(site: Path) -> dict[str, str]:
    """The environment a ``ptebuild`` process finds what is installed in ``site`` in."""
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": str(site) + (os.pathsep + path if path else "")}


def install(plugin: Path, target: Path) -> Path:
    """Install the distribution of ``plugin`` (its ``pyproject.toml`` and ``src/``) into ``target``."""
    project = tomllib.loads((plugin / "pyproject.toml").read_text())["project"]
    target.mkdir(parents=True, exist_ok=True)
    packages = [p for p in (plugin / "src").iterdir() if (p / "__init__.py").is_file()]
    for package in packages:
        shutil.copytree(package, target / package.name, ignore=shutil.ignore_patterns("__pycache__"))
    name = project["name"].replace("-", "_")
    info = target / f"{name}-{project['version']}.dist-info"
    info.mkdir()
    requires = "".join(f"Requires-Dist: {r}\n" for r in project.get("dependencies", []))
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
        f"Summary: {project.get('description', '')}\n{requires}"
    )
    points = "".join(
        f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in entries.items()) + "\n"
        for group, entries in project.get("entry-points", {}).items()
    )
    (info / "entry_points.txt").write_text(points)
    (info / "top_level.txt").write_text("".join(f"{p.name}\n" for p in packages))
    (info / "INSTALLER").write_text("ptebuild-tests\n")
    lines = []
    mine = [p for pkg in packages for p in (target / pkg.name).rglob("*") if p.is_file()]
    for path in sorted(mine + [p for p in info.iterdir() if p.name != "RECORD"]):
        data = path.read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{path.relative_to(target).as_posix()},sha256={digest},{len(data)}")
    lines.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(lines) + "\n")
    return target
