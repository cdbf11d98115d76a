"""Find a factory's module on disk without importing it (importing runs the model's code)."""

from __future__ import annotations

import sys
from pathlib import Path


def find_module_file(module: str, search_path: list[str]) -> Path | None:
    """Find the file of ``module`` (dotted) on ``search_path`` without importing anything."""
    parts = module.split(".")
    for entry in search_path:
        base = Path(entry or ".", *parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def module_search_path(manifest_dir: Path) -> list[str]:
    """Where factories are imported from: the manifest's folder first, then the environment."""
    return [str(manifest_dir)] + [p for p in sys.path if p]
