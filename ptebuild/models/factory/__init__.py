"""The ``factory`` model kind: a Python callable returns the model (``factory = "pkg.mod:fn"``).

The default kind (a model table without ``kind``); its table is :mod:`.spec`, its methods
resolved by :mod:`.methods`. Its build (:mod:`.build`): the model made by :mod:`.loading` (its
weights read as saved: :mod:`.checkpoints`), each method exported and lowered with the backend's
hooks (:mod:`.lower`) and checked against it in ExecuTorch's runtime, a wrong program located
(:mod:`.divergence`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptebuild.models.base import BuildJob, BuiltProgram, ModelKind, ResolvedModel

if TYPE_CHECKING:
    from pydantic import BaseModel


class FactoryKind(ModelKind):
    name = "factory"

    def spec_model(self) -> type[BaseModel]:
        from ptebuild.models.factory.spec import ModelSpec

        return ModelSpec

    def resolve(self, spec: Any, *, display: str, model_name: str, manifest_dir: Path, offline: bool = False) -> ResolvedModel:
        from ptebuild.models.factory.methods import resolve_methods

        return ResolvedModel(
            methods=resolve_methods(display, model_name, spec),
            seed=spec.seed,
            factory=spec.factory,
            kwargs=dict(spec.kwargs),
            weights=spec.weights,
            sources=tuple(spec.sources),
        )


    def build(self, job: BuildJob) -> BuiltProgram:
        from ptebuild.models.factory.build import build_program

        return build_program(job)


KIND = FactoryKind()
