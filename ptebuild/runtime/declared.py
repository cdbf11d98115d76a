"""What a built program was declared as, read back from the build record beside it.

A ``.pte`` knows its inputs only as upper bounds (``float32[8, 3, 96, 96] (dynamic-bound)``); the
manifest named them and their dynamic dims (``image: float32[batch, 3, 96, 96]``, ``batch
1..8``). The build record in the same folder (:mod:`.record`) keeps the manifest entries each
program's key was computed from, so ``ptebuild inspect`` can say what the program takes in the
manifest's words. Only a file that the record names with its exact bytes is described so; a
copied or edited file is not. Imports neither torch, executorch nor pydantic.

The record's entries read here (JSON texts, as :mod:`ptebuild.builder.keys` writes them)::

    "manifest.model.dims.batch.min": "1", "manifest.model.dims.batch.max": "8",
    "manifest.model.methods.forward.inputs": "[{\"name\":\"x\",\"shape\":[\"batch\",6],\"dtype\":\"float32\",...}]",
    "manifest.model.methods.forward.dims": "{\"steps\":{\"min\":1,\"max\":4,\"example\":null}}"
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptebuild.errors import FormatError
from ptebuild.runtime.record import read_build_record

_MODEL_DIM = "manifest.model.dims."
_METHOD = "manifest.model.methods."


@dataclass(frozen=True)
class DeclaredInput:
    """One tensor the method takes, as the manifest named it (``obs.image`` inside a container)."""

    name: str
    dtype: str
    shape: tuple[str | int, ...]

    def describe(self) -> str:
        return f"{self.name}: {self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class DeclaredProgram:
    """The program (or, for a ``.ptd``, the programs) that wrote a file, as the record says."""

    programs: tuple[str, ...]
    files: dict[str, int] = field(default_factory=dict)
    """Every output of those programs -> its size in bytes."""
    inputs: dict[str, tuple[DeclaredInput, ...]] = field(default_factory=dict)
    """Method -> its tensor inputs, flattened in order (a container's items in place)."""
    dims: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    """Method -> each dynamic dim it may use -> (min, max)."""


def declared_program(path: str | Path) -> DeclaredProgram | None:
    """What the build record beside ``path`` says wrote it, or None (no record, a record that
    cannot be read, or a file whose bytes are not the ones the record names)."""
    path = Path(path)
    try:
        record = read_build_record(path.parent)
    except FormatError:
        return None
    if record is None:
        return None
    owners = record.programs_using(path)
    if not owners:
        return None
    entries = record.entries()
    files = {name: size for owner in owners for name, _, size in entries[owner].outputs}
    first = entries[owners[0]]
    try:
        inputs, dims = _methods(first.inputs)
    except (ValueError, TypeError, KeyError, AttributeError):
        inputs, dims = {}, {}
    if len(owners) > 1 or not path.name.endswith(".pte"):
        inputs, dims = {}, {}
    return DeclaredProgram(tuple(owners), files, inputs, dims)


def _methods(entries: dict[str, str]) -> tuple[dict[str, tuple[DeclaredInput, ...]], dict[str, dict[str, tuple[int, int]]]]:
    model_dims: dict[str, dict[str, int]] = {}
    for key, text in entries.items():
        if key.startswith(_MODEL_DIM):
            name, _, bound = key[len(_MODEL_DIM):].rpartition(".")
            if bound in ("min", "max"):
                model_dims.setdefault(name, {})[bound] = int(json.loads(text))
    inputs: dict[str, tuple[DeclaredInput, ...]] = {}
    dims: dict[str, dict[str, tuple[int, int]]] = {}
    for key, text in entries.items():
        if not (key.startswith(_METHOD) and key.endswith(".inputs")):
            continue
        method = key[len(_METHOD):-len(".inputs")]
        own = json.loads(entries.get(f"{_METHOD}{method}.dims", "{}")) or {}
        ranges = {name: (bounds.get("min", 1), bounds["max"]) for name, bounds in model_dims.items() if "max" in bounds}
        ranges.update({name: (spec.get("min", 1), spec["max"]) for name, spec in own.items()})
        leaves = tuple(_leaves(json.loads(text), ""))
        inputs[method] = leaves
        used = {d for leaf in leaves for d in leaf.shape if isinstance(d, str)}
        dims[method] = {name: ranges[name] for name in sorted(used) if name in ranges}
    return inputs, dims


def _leaves(specs: list[dict[str, Any]], prefix: str) -> list[DeclaredInput]:
    found: list[DeclaredInput] = []
    for spec in specs:
        name = prefix + str(spec["name"])
        if spec.get("items") is not None:
            found += _leaves(spec["items"], name + ".")
        elif spec.get("shape") is not None:
            found.append(DeclaredInput(name, str(spec.get("dtype") or "float32"), tuple(spec["shape"])))
    return found
