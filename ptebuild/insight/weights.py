"""A program's weights as it was lowered: which were quantized, which stayed float, and why.

Counted by the worker on the exported graphs the backend lowered (after quantization:
:func:`ptebuild.lowering.weights.weights_split`), one entry per weight (a parameter or a tensor
constant of the graph; mutable state is not a weight): its name, dtype, shape and bytes as the
program stores it, whether a dequantize operator reads it (``quantized``), and the operators that
read it. A float weight of a program that quantized others says why it stayed float
(:attr:`WeightEntry.why`): the bias of a quantized operator (kept float by design), or the operator
that takes it, which the quantizer did not quantize (``aten.gru.input``: an RNN; a linear the
scheme skipped). Nothing here imports torch.

JSON (``ProgramInsight``'s ``weights``): ``{"methods": {"forward": [{"name": "conv.0.weight",
"dtype": "int8", "shape": [16, 4, 3], "bytes": 192, "quantized": true, "readers": ["dequantize_per_channel"],
"why": ""}, ...]}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ptebuild.jsonable import Jsonable


@dataclass(frozen=True)
class WeightEntry(Jsonable):
    """One weight of one method, as the lowered program stores it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    bytes: int
    quantized: bool
    readers: tuple[str, ...] = ()
    """The operators that read it (without their ``aten.``/overload noise where it is plain)."""
    why: str = ""
    """A float weight of a quantized program: why it stayed float, in words; empty otherwise."""


@dataclass(frozen=True)
class WeightsSplit:
    """Each method's weights (see the module docstring)."""

    methods: tuple[tuple[str, tuple[WeightEntry, ...]], ...] = ()

    @property
    def entries(self) -> list[WeightEntry]:
        """Every weight once (a weight several methods read counts once, by name)."""
        seen: dict[str, WeightEntry] = {}
        for _, entries in self.methods:
            for entry in entries:
                seen.setdefault(entry.name, entry)
        return list(seen.values())

    @property
    def quantized(self) -> list[WeightEntry]:
        return [e for e in self.entries if e.quantized]

    @property
    def kept_float(self) -> list[WeightEntry]:
        """The float weights of a program that quantized others (none where nothing was quantized)."""
        return [e for e in self.entries if not e.quantized] if self.quantized else []

    def describe(self) -> list[str]:
        """``weights: 6 quantized (int8) 74.4 KiB; 4 float 25.1 KiB: ...`` and one line per float weight's cause."""
        if not self.quantized:
            return []
        from ptebuild.sizes import format_size as format_bytes

        quantized, kept = self.quantized, self.kept_float
        dtypes = "/".join(sorted({e.dtype for e in quantized}))
        line = (f"weights: {len(quantized)} quantized ({dtypes}) {format_bytes(sum(e.bytes for e in quantized))}; "
                f"{len(kept)} float {format_bytes(sum(e.bytes for e in kept))}")
        lines = [line]
        by_why: dict[str, list[WeightEntry]] = {}
        for entry in kept:
            by_why.setdefault(entry.why, []).append(entry)
        for why, entries in by_why.items():
            names = ", ".join(f"{e.name} {e.dtype}{list(e.shape)} {format_bytes(e.bytes)}" for e in entries[:4])
            more = f" and {len(entries) - 4} more" if len(entries) > 4 else ""
            lines.append(f"  float: {names}{more}: {why}")
        return lines

    def warning(self) -> str | None:
        """One line for the build when a quantized program keeps weights float for a reason other
        than design (a bias, a normalization's scale): which, their bytes, and why; None otherwise."""
        from ptebuild.sizes import format_size as format_bytes

        kept = [e for e in self.kept_float if not e.why.endswith("kept float by design)")]
        if not kept:
            return None
        total = sum(e.bytes for e in self.entries)
        by_why: dict[str, list[str]] = {}
        for entry in kept:
            by_why.setdefault(entry.why, []).append(entry.name)
        causes = "; ".join(f"{', '.join(names[:3])}{f' and {len(names) - 3} more' if len(names) > 3 else ''}: {why}"
                           for why, names in by_why.items())
        return (f"{len(kept)} weight{'s' if len(kept) != 1 else ''} stayed float "
                f"({format_bytes(sum(e.bytes for e in kept))} of {format_bytes(total)} of weights): {causes}")

    def to_json(self) -> dict[str, Any]:
        return {"methods": {method: [e.to_json() for e in entries] for method, entries in self.methods}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WeightsSplit:
        """Raises ValueError (:class:`ptebuild.jsonable.JsonShapeError`), TypeError or KeyError if
        ``data`` is not a weights split."""
        methods = data["methods"]
        if not isinstance(methods, Mapping):
            raise TypeError("weights.methods must be an object of method name to weights")
        return cls(tuple((str(name), tuple(WeightEntry.from_json(e) for e in entries)) for name, entries in methods.items()))
