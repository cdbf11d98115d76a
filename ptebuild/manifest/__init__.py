"""Manifests: TOML files that declare models, programs and shim libraries.

:func:`load_manifest` reads one into a :class:`BuildPlan`, imports pydantic but never torch.
The names load their module on first use: a no-op build reads a cached plan and never needs
the TOML reader or the validation.
"""

from __future__ import annotations

from ptebuild.lazy import lazy_exports

_EXPORTS = {
    "load_manifest": "load",
    "BuildPlan": "..plan",
    "MethodPlan": "..plan",
    "ProgramPlan": "..plan",
    "ShimPlan": "..plan",
}

__all__ = sorted(_EXPORTS)

TYPE_CHECKING = False  # what the type checker sees of the table above; nothing is imported at run time
if TYPE_CHECKING:
    from ptebuild.manifest.load import load_manifest as load_manifest
    from ptebuild.plan import BuildPlan as BuildPlan
    from ptebuild.plan import MethodPlan as MethodPlan
    from ptebuild.plan import ProgramPlan as ProgramPlan
    from ptebuild.plan import ShimPlan as ShimPlan


__getattr__ = lazy_exports(__name__, _EXPORTS)
