"""Manifests: TOML files that declare models, programs and shim libraries.

:func:`load_manifest` reads one into a :class:`BuildPlan`, imports pydantic but never torch.
The names load their module on first use: a no-op build reads a cached plan and never needs
the TOML reader or the validation.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "load_manifest": "load",
    "BuildPlan": "plan",
    "MethodPlan": "plan",
    "ProgramPlan": "plan",
    "ShimPlan": "plan",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ptebuild.manifest' has no attribute {name!r}")
    return getattr(importlib.import_module(f"ptebuild.manifest.{module}"), name)
