"""Reading ``.pte``/``.ptd`` files without executing them, and loading them verified.

Importing this package imports neither torch nor executorch (nor its own readers: the names
below load their module on first use, so ``ptebuild.runtime.record`` stays cheap for a no-op
build); :func:`load` imports ``executorch.runtime`` only once the files have passed their checks.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "CheckedFiles": "loader",
    "VerifiedProgram": "loader",
    "check": "loader",
    "load": "loader",
    "PtdEntry": "ptd_file",
    "PtdFile": "ptd_file",
    "read_ptd": "ptd_file",
    "PteFile": "pte_file",
    "read_pte": "pte_file",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ptebuild.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(f"ptebuild.runtime.{module}"), name)
