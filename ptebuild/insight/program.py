"""A program's figures: its delegation, its size split and each method's memory, as one value.

Two halves come from two places. The worker counts what only the lowered graph knows (the
delegation, mutable buffers, outputs' bytes at each size: :func:`ProgramInsight.from_json` of
what it sends, kept with the action result); the builder adds what the files say (the size
split and the planned buffers: :meth:`ProgramInsight.with_files`), for a restored program as for
a new one. The report, the build record and ``inspect`` show this value; budgets judge it.

JSON::

    {"delegation": {...} | null,          # ptebuild.insight.delegation
     "size": {...} | null,                # ptebuild.insight.sizes
     "memory": {"forward": {"planned": [37184], "planned_bytes": 37184, "mutable": [...],
                            "io": [{"at": "example", "sizes": {"batch": 2}, "inputs": 6144, "outputs": 32}, ...]}},
     "weights": {...}}                     # ptebuild.insight.weights; absent where not counted
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ptebuild.insight.delegation import Delegation, percent
from ptebuild.insight.memory import MethodMemory
from ptebuild.insight.sizes import SizeSplit
from ptebuild.insight.weights import WeightsSplit


@dataclass(frozen=True)
class ProgramInsight:
    """What is inside one program (see the module docstring); a part is None where unknown."""

    delegation: Delegation | None = None
    size: SizeSplit | None = None
    memory: tuple[MethodMemory, ...] = ()
    weights: WeightsSplit | None = None
    """Which weights were quantized and which stayed float (counted by the worker)."""

    @property
    def planned_bytes(self) -> int | None:
        """The planned memory of all methods together (each loaded method holds its own); None
        when the files were not read."""
        if self.size is None:
            return None
        return sum(m.planned_bytes for m in self.memory)

    def with_files(self, size: SizeSplit, planned: Mapping[str, tuple[int, ...]]) -> ProgramInsight:
        """These figures with what the files say: the size split and each method's planned buffers."""
        known = {m.method: m for m in self.memory}
        memory = [replace(known.get(name, MethodMemory(name)), planned=tuple(buffers)) for name, buffers in planned.items()]
        memory += [m for name, m in known.items() if name not in planned]
        return replace(self, size=size, memory=tuple(memory))

    def worker_part(self) -> ProgramInsight:
        """What the worker knows (no size, no planned buffers): what an action result keeps."""
        return ProgramInsight(self.delegation, None, tuple(replace(m, planned=()) for m in self.memory), self.weights)

    def method_memory(self, name: str) -> MethodMemory | None:
        return next((m for m in self.memory if m.method == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "delegation": self.delegation.to_json() if self.delegation is not None else None,
            "size": self.size.to_json() if self.size is not None else None,
            "memory": {m.method: m.to_json() for m in self.memory},
            **({"weights": self.weights.to_json()} if self.weights is not None else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> ProgramInsight:
        """Raises TypeError, KeyError or ValueError if ``data`` is not a program's figures."""
        if not data:
            return cls()
        delegation = data.get("delegation")
        size = data.get("size")
        memory = data.get("memory") or {}
        if not isinstance(memory, Mapping):
            raise TypeError("memory must be an object of method name to memory")
        weights = data.get("weights")
        return cls(
            Delegation.from_json(delegation) if delegation is not None else None,
            SizeSplit.from_json(size) if size is not None else None,
            tuple(MethodMemory.from_json(str(name), m) for name, m in memory.items()),
            WeightsSplit.from_json(weights) if weights is not None else None,
        )

    # -- as text ----------------------------------------------------------------------------------

    def cells(self) -> tuple[str, str, str]:
        """The report table's ``delegated``, ``size`` and ``planned`` cells."""
        delegated = percent(self.delegation.fraction) if self.delegation is not None else "-"
        if self.size is None:
            return delegated, "-", "-"
        size = format_bytes(self.size.pte) + (f" + {format_bytes(self.size.ptd_bytes)}" if self.size.ptd else "")
        return delegated, size, format_bytes(self.planned_bytes or 0)

    def describe(self) -> list[str]:
        """The figures as lines of text (``inspect``, ``build --explain``)."""
        lines = []
        if self.delegation is not None:
            lines.append(f"delegation: {self.delegation.describe()}")
            for d in self.delegation.methods:
                shares = "; ".join(f"{s.backend} {s.nodes} nodes in {_plural(s.subgraphs, 'subgraph')}" for s in d.delegates)
                shares = shares or "nothing delegated"
                left = ", ".join(f"{op} ×{n}" for op, n in d.non_delegated) or "-"
                lines.append(f"  {d.method}: {percent(d.fraction)}: {shares}; left to kernels: {left}")
        if self.size is not None:
            parts = ", ".join(f"{label} {format_bytes(n)}" for label, n in self.size.pte_parts())
            lines.append(f"size: .pte {format_bytes(self.size.pte)}: {parts}")
            for f in self.size.ptd:
                shared = f", shared with {', '.join(f.shared_with)}" if f.shared_with else ""
                lines.append(f"  {f.name} {format_bytes(f.size)}{shared}")
        for m in self.memory:
            line = f"memory {m.method}: planned {format_bytes(m.planned_bytes)}"
            if len(m.planned) > 1:
                line += f" in {len(m.planned)} buffers"
            if m.mutable:
                line += f"; mutable buffers {format_bytes(m.mutable_bytes)} (" + ", ".join(
                    f"{t.name} {t.dtype}{list(t.shape)}" for t in m.mutable) + ")"
            for point in m.io:
                sizes = ", ".join(f"{d}={n}" for d, n in point.sizes)
                at = f"{point.at} ({sizes})" if sizes else point.at
                outputs = format_bytes(point.outputs) if point.outputs is not None else "?"
                line += f"; at {at}: inputs {format_bytes(point.inputs)}, outputs {outputs}"
            lines.append(line)
        if self.weights is not None:
            lines += self.weights.describe()
        return lines


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def format_bytes(n: int) -> str:
    """``512 B``, ``36.3 KiB``, ``1.5 GiB``."""
    from ptebuild.sizes import format_size

    return format_size(n)
