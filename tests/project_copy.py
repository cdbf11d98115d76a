"""Copies of the tiny test project (``tests/manifests/tiny.toml`` and its models)."""

from __future__ import annotations

import shutil
from pathlib import Path

MANIFESTS = Path(__file__).resolve().parent / "manifests"


def copy_project(dest: Path) -> Path:
    """Copy tiny.toml and its models into ``dest``; return the manifest's path."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(MANIFESTS / "tiny.toml", dest / "tiny.toml")
    shutil.copytree(MANIFESTS / "tinymodels", dest / "tinymodels", ignore=shutil.ignore_patterns("__pycache__"))
    return dest / "tiny.toml"
