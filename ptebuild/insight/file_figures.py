"""What ``ptebuild inspect`` shows of a ``.pte``'s figures: what the file itself says, and what
the build record beside it recorded.

From the file alone: each method's delegate and operator calls (:mod:`.calls`), the size split
(:mod:`.sizes`), the planned buffers, and the inputs' and outputs' bytes at the sizes the file
declares (a dynamic tensor's upper bound: :data:`~.memory.BOUND`). From a build record
(``ptebuild.json``) in the same folder that names this file with these bytes: the program's
name, its ``.ptd`` files (and who shares them), and the figures its build counted (delegation
by operator, mutable buffers, inputs' and outputs' bytes at each dynamic size), which the file
does not keep. A record that cannot be read is passed over (a note says so): the file's own
figures still stand.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptebuild.errors import FormatError
from ptebuild.insight.calls import MethodCalls, program_calls
from ptebuild.insight.figures import ProgramFigures
from ptebuild.insight.memory import BOUND, IoPoint, MethodMemory, planned_buffers, tensor_bytes
from ptebuild.insight.sizes import WeightsFile, pte_split


@dataclass(frozen=True)
class FileFigures:
    """A ``.pte``'s figures as ``inspect`` shows them (see the module docstring)."""

    calls: tuple[MethodCalls, ...]
    figures: ProgramFigures
    program: str | None = None
    """The program the build record beside the file names for it (None: no record says)."""
    recorded: bool = False
    """The delegation and memory figures are those the build recorded."""
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "program": self.program,
            "recorded": self.recorded,
            "calls": {c.method: c.to_json() for c in self.calls},
            **self.figures.to_json(),
            "notes": list(self.notes),
        }

    def describe(self) -> list[str]:
        lines = [f"calls {c.method}: {c.describe()}" for c in self.calls]
        if self.program is not None:
            source = "recorded by its build" if self.recorded else "the build record has no figures for it"
            lines.append(f"program {self.program} ({source}, {Path('ptebuild.json')})")
        lines += self.figures.describe()
        lines += [f"note: {note}" for note in self.notes]
        return lines


def read_file_figures(path: str | os.PathLike[str]) -> FileFigures:
    """The figures of the ``.pte`` at ``path`` (see the module docstring).

    Raises FormatError (a corrupt ``.pte``) or OSError.
    """
    path = Path(path)
    calls = program_calls(path)
    split = pte_split(path)
    planned = planned_buffers(path)
    program, recorded, weights, notes = _recorded(path)
    base = recorded if recorded is not None else ProgramFigures(memory=_bound_io(path))
    return FileFigures(calls, base.with_files(split.with_weights(weights), planned), program, recorded is not None, tuple(notes))


def _recorded(path: Path) -> tuple[str | None, ProgramFigures | None, list[WeightsFile], list[str]]:
    from ptebuild.runtime.record import read_build_record

    try:
        record = read_build_record(path.parent)
    except FormatError as exc:
        return None, None, [], [f"the build record beside it is not used: {exc}"]
    if record is None:
        return None, None, [], []
    owners = record.programs_using(path)
    if len(owners) != 1:
        return None, None, [], []
    name = owners[0]
    entry = record.targets[name]
    weights = []
    for file, info in sorted(entry["outputs"].items()):
        if file.endswith(".ptd"):
            others = tuple(sorted(other for other, e in record.targets.items() if other != name and file in e.get("outputs", {})))
            weights.append(WeightsFile(file, int(info["bytes"]), others))
    try:
        figures = ProgramFigures.from_json(entry["figures"]) if isinstance(entry.get("figures"), dict) else None
    except (KeyError, TypeError, ValueError):
        return name, None, weights, [f"the figures the build record keeps for {name} cannot be read"]
    return name, figures, weights, []


def _bound_io(path: Path) -> tuple[MethodMemory, ...]:
    """Each method's inputs' and outputs' bytes at the sizes the file declares."""
    from ptebuild.runtime.pte_file import open_pte
    from ptebuild.runtime.pte_inspection import DTYPES

    found = []
    with open_pte(path) as pte:
        for plan in pte.execution_plans():
            values = plan.values()

            def total(indexes: list[int], values: Any = values) -> int:
                size = 0
                for i in indexes:
                    tensor = values[i].tensor if 0 <= i < len(values) else None
                    if tensor is not None:
                        size += tensor_bytes(DTYPES.get(tensor.scalar_type, "?"), tensor.sizes) or 0
                return size

            found.append(MethodMemory(plan.name(), (), (), (IoPoint(BOUND, (), total(plan.inputs()), total(plan.outputs())),)))
    return tuple(found)
