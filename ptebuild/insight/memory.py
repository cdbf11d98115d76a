"""What a method needs in memory: its planned buffers, mutable buffers, inputs and outputs.

- **Planned memory**: the sizes of the memory-planned buffers of the method's execution plan
  (``ExecutionPlan.non_const_buffer_sizes``; entry 0 is reserved by ExecuTorch and is 0), which
  a runtime allocates when it loads the method: activations, and mutable buffers (a KV cache)
  unless they were left unplanned. Memory a delegate allocates itself (XNNPACK's workspace, a GPU
  backend's buffers) is not in it. Read from the ``.pte``
  (:func:`ptebuild.runtime.pte_insight.planned_buffers`).
- **Mutable buffers**: buffers the method updates in place (a KV cache), by name, dtype, shape
  and bytes; found by the worker in the exported program (:mod:`ptebuild.lowering.memory`).
- **Inputs and outputs**: their bytes at sizes of the dynamic dims (:func:`io_points`): the
  example size, each dim at its max (the others at the example), and all at their max when
  there are several. Inputs from the manifest's shapes; outputs from the exported program's
  symbolic shapes, in the worker. For a ``.pte`` alone: at the sizes the file declares (a
  dynamic tensor's upper bound).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

from ptebuild.plan import InputPlan, MethodPlan

ITEM_BYTES = {
    "bool": 1, "uint8": 1, "int8": 1, "qint8": 1, "quint8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2,
    "int32": 4, "uint32": 4, "qint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8, "float8_e5m2": 1,
    "float8_e4m3fn": 1, "float8_e5m2fnuz": 1, "float8_e4m3fnuz": 1, "bits16": 2,
}
"""Bytes per element of each dtype a program's tensors may have (torch's names)."""

EXAMPLE = "example"
ALL_MAX = "all at max"
BOUND = "upper bound"
"""The label of the sizes a ``.pte`` declares (a dynamic-bound tensor's largest)."""

Sizes = tuple[tuple[str, int], ...]
"""Dynamic dim name -> size, sorted by name."""


def tensor_bytes(dtype: str, shape: Sequence[int]) -> int | None:
    """Bytes of a dense tensor; None for a dtype whose size is unknown."""
    item = ITEM_BYTES.get(dtype)
    return None if item is None else item * prod(shape)


@dataclass(frozen=True)
class TensorBytes:
    """A named tensor (a mutable buffer): dtype, shape and bytes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "bytes": self.size}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TensorBytes:
        return cls(str(data["name"]), str(data["dtype"]), tuple(int(n) for n in data["shape"]), int(data["bytes"]))


@dataclass(frozen=True)
class IoPoint:
    """A method's inputs' and outputs' bytes at one choice of its dynamic dims' sizes."""

    at: str
    """``example``, ``<dim> max``, ``all at max``, or ``upper bound`` (a ``.pte`` alone)."""
    sizes: Sizes
    inputs: int
    outputs: int | None
    """None when unknown (an output whose size the exported program does not say)."""

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "sizes": dict(self.sizes), "inputs": self.inputs, "outputs": self.outputs}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> IoPoint:
        outputs = data.get("outputs")
        return cls(str(data["at"]), tuple(sorted((str(k), int(v)) for k, v in dict(data.get("sizes") or {}).items())),
                   int(data["inputs"]), None if outputs is None else int(outputs))


@dataclass(frozen=True)
class MethodMemory:
    """One method's memory (see the module docstring)."""

    method: str
    planned: tuple[int, ...] = ()
    """The planned buffers' sizes, entry 0 (reserved) left out."""
    mutable: tuple[TensorBytes, ...] = ()
    io: tuple[IoPoint, ...] = ()

    @property
    def planned_bytes(self) -> int:
        return sum(self.planned)

    @property
    def mutable_bytes(self) -> int:
        return sum(t.size for t in self.mutable)

    def point(self, at: str) -> IoPoint | None:
        return next((p for p in self.io if p.at == at), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "planned": list(self.planned),
            "planned_bytes": self.planned_bytes,
            "mutable": [t.to_json() for t in self.mutable],
            "io": [p.to_json() for p in self.io],
        }

    @classmethod
    def from_json(cls, method: str, data: Mapping[str, Any]) -> MethodMemory:
        """Raises TypeError, KeyError or ValueError if ``data`` is not a method's memory."""
        return cls(
            method,
            tuple(int(n) for n in data.get("planned") or ()),
            tuple(TensorBytes.from_json(t) for t in data.get("mutable") or ()),
            tuple(IoPoint.from_json(p) for p in data.get("io") or ()),
        )


def io_points(method: MethodPlan) -> tuple[tuple[str, Sizes], ...]:
    """The sizes of the method's dynamic dims at which its inputs and outputs are measured:
    ``example``, ``<dim> max`` for each dim, and ``all at max`` when there are several."""
    example = {d.name: d.example for d in method.dims}
    points: list[tuple[str, Sizes]] = [(EXAMPLE, _sorted(example))]
    for dim in method.dims:
        points.append((f"{dim.name} max", _sorted({**example, dim.name: dim.max})))
    if len(method.dims) > 1:
        points.append((ALL_MAX, _sorted({d.name: d.max for d in method.dims})))
    return tuple(points)


def input_bytes(method: MethodPlan, sizes: Mapping[str, int]) -> int:
    """The bytes of the method's tensor inputs with the dynamic dims at ``sizes`` (scalars: none)."""
    total = 0
    for leaf in method.leaves():
        if leaf.kind == "tensor":
            total += tensor_bytes(leaf.dtype, _shape(leaf, sizes)) or 0
    return total


def _shape(leaf: InputPlan, sizes: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(sizes[d] if isinstance(d, str) else d for d in leaf.shape)


def _sorted(sizes: Mapping[str, int]) -> Sizes:
    return tuple(sorted(sizes.items()))
