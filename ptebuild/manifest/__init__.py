"""Manifests: TOML files that declare models, programs and shim libraries.

:func:`load_manifest` reads one into a :class:`BuildPlan`, imports pydantic but never torch.
The names load their module on first use: a no-op build reads a cached plan and never needs
the TOML reader or the validation.
"""

from __future__ import annotations

from ptebuild.lazy import lazy_exports

_EXPORTS = {
    "load_manifest": "load",
    "BuildPlan": "plan",
    "MethodPlan": "plan",
    "ProgramPlan": "plan",
    "ShimPlan": "plan",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
