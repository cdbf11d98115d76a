"""What ``ptebuild inspect`` shows of a ``.pte``'s figures: what the file itself says, and what
the build record beside it recorded (read by :func:`ptebuild.runtime.pte_insight.read_file_insight`).

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

from dataclasses import dataclass
from typing import Any

from ptebuild.insight.calls import MethodCalls
from ptebuild.insight.program import ProgramInsight


@dataclass(frozen=True)
class FileInsight:
    """A ``.pte``'s figures as ``inspect`` shows them (see the module docstring)."""

    calls: tuple[MethodCalls, ...]
    insight: ProgramInsight
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
            **self.insight.to_json(),
            "notes": list(self.notes),
        }

    def describe(self) -> list[str]:
        lines = [f"calls {c.method}: {c.describe()}" for c in self.calls]
        if self.program is not None:
            source = "recorded by its build" if self.recorded else "the build record has no figures for it"
            lines.append(f"program {self.program} ({source}, ptebuild.json)")
        lines += self.insight.describe()
        lines += [f"note: {note}" for note in self.notes]
        return lines
