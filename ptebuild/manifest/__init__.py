"""Manifests: TOML files that declare models, programs and shim libraries.

:func:`load_manifest` reads one into a :class:`BuildPlan`, imports pydantic but never torch.
"""

from ptebuild.manifest.load import load_manifest
from ptebuild.manifest.plan import BuildPlan, MethodPlan, ProgramPlan, ShimPlan

__all__ = ["BuildPlan", "MethodPlan", "ProgramPlan", "ShimPlan", "load_manifest"]
