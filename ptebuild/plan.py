"""The build plan: a validated manifest resolved into plain, JSON-able records.

Everything downstream (keys, builder, workers, the no-op fast path) works from these frozen
dataclasses, never from the pydantic models, so that a build whose manifest has not changed can
skip validation altogether (see :mod:`ptebuild.manifest.load`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ptebuild.canonical import canonical_json


@dataclass(frozen=True)
class InputPlan:
    name: str
    shape: tuple[int | str, ...]
    dtype: str
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class DimPlan:
    name: str
    min: int
    max: int
    example: int


@dataclass(frozen=True)
class MethodPlan:
    name: str
    function: str
    inputs: tuple[InputPlan, ...]
    dims: tuple[DimPlan, ...]

    def example_shape(self, spec: InputPlan) -> tuple[int, ...]:
        sizes = {dim.name: dim.example for dim in self.dims}
        return tuple(sizes[d] if isinstance(d, str) else d for d in spec.shape)


@dataclass(frozen=True)
class ProgramPlan:
    name: str
    model: str
    backend: str
    factory: str
    kwargs: dict[str, Any]
    weights: str | None
    """Path of the weights file relative to the manifest folder."""
    seed: int
    sources: tuple[str, ...]
    methods: tuple[MethodPlan, ...]
    data_name: str | None
    options: dict[str, Any]
    atol: float
    min_cosine: float
    check_enabled: bool
    model_entry: dict[str, Any]
    """The model's manifest entry, normalised: what the action key hashes."""
    program_entry: dict[str, Any]
    """The program's manifest entry with defaults applied, normalised."""

    @property
    def pte_name(self) -> str:
        return f"{self.name}.pte"

    @property
    def ptd_name(self) -> str | None:
        return f"{self.data_name}.ptd" if self.data_name else None

    @property
    def output_names(self) -> tuple[str, ...]:
        return (self.pte_name,) + ((self.ptd_name,) if self.ptd_name else ())


@dataclass(frozen=True)
class ShimPlan:
    name: str
    source: str
    """Path of the shim list relative to the manifest folder."""
    format: str
    keep_order: bool

    @property
    def lib_name(self) -> str:
        return f"{self.name}.lib"

    @property
    def output_names(self) -> tuple[str, ...]:
        return (self.lib_name,)


@dataclass(frozen=True)
class BuildPlan:
    manifest: str
    """The manifest path as the user gave it (for messages)."""
    manifest_dir: str
    out: str
    """The output folder, relative to the manifest folder unless absolute."""
    programs: tuple[ProgramPlan, ...]
    shims: tuple[ShimPlan, ...] = field(default=())

    def out_dir(self) -> Path:
        return Path(os.path.normpath(Path(self.manifest_dir, self.out)))

    def to_json(self) -> str:
        return canonical_json(asdict(self))

    @classmethod
    def from_json(cls, text: str, *, manifest: str, manifest_dir: str) -> BuildPlan:
        data = json.loads(text)
        programs = []
        for p in data["programs"]:
            methods = tuple(
                MethodPlan(
                    name=m["name"],
                    function=m["function"],
                    inputs=tuple(InputPlan(**{**i, "shape": tuple(i["shape"])}) for i in m["inputs"]),
                    dims=tuple(DimPlan(**d) for d in m["dims"]),
                )
                for m in p["methods"]
            )
            programs.append(ProgramPlan(**{**p, "methods": methods, "sources": tuple(p["sources"])}))
        shims = tuple(ShimPlan(**s) for s in data["shims"])
        return cls(
            manifest=manifest,
            manifest_dir=manifest_dir,
            out=data["out"],
            programs=tuple(programs),
            shims=shims,
        )

    def shared_data(self) -> dict[str, tuple[str, ...]]:
        """Data names that several programs share -> those programs (their weights go in one ``.ptd``)."""
        users: dict[str, list[str]] = {}
        for p in self.programs:
            if p.data_name:
                users.setdefault(p.data_name, []).append(p.name)
        return {name: tuple(programs) for name, programs in users.items() if len(programs) > 1}

    def select(self, names: list[str]) -> BuildPlan:
        """The plan restricted to the programs and shim libraries called ``names``, and the
        programs that share a data name with one of them (a shared ``.ptd`` is written whole)."""
        wanted = set(names)
        for programs in self.shared_data().values():
            if wanted & set(programs):
                wanted |= set(programs)
        return BuildPlan(
            manifest=self.manifest,
            manifest_dir=self.manifest_dir,
            out=self.out,
            programs=tuple(p for p in self.programs if p.name in wanted),
            shims=tuple(s for s in self.shims if s.name in wanted),
        )
