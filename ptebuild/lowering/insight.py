"""A lowered program's figures that only its graphs know (:mod:`ptebuild.insight.program`).

Called by the worker with the edge program manager that ``to_edge_transform_and_lower`` returned,
before ``to_executorch``: per method, the delegation (:mod:`.delegation`), the mutable buffers and
the inputs' and outputs' bytes at each size (:mod:`.memory`). What the files say (the size split,
the planned buffers) is added by the builder from the published files.
"""

from __future__ import annotations

from typing import Any

from ptebuild.causes import describe
from ptebuild.insight.program import ProgramInsight
from ptebuild.lowering.delegation import program_delegation
from ptebuild.lowering.memory import method_memory
from ptebuild.plan import ProgramPlan


def lowered_insight(edge: Any, program: ProgramPlan) -> ProgramInsight:
    """The worker's half of ``program``'s figures, from its lowered edge program manager."""
    names = [m.name for m in program.methods]
    memory = tuple(method_memory(edge.exported_program(m.name), m) for m in program.methods)
    return ProgramInsight(program_delegation(edge, names), None, memory)


def counted(edge: Any, program: ProgramPlan, problems: list[str]) -> ProgramInsight | None:
    """:func:`lowered_insight`, or None and a line in ``problems`` if the figures cannot be
    counted: a program is never refused for its figures (every pipeline that lowers calls this)."""
    try:
        return lowered_insight(edge, program)
    except Exception as exc:
        problems.append(f"its delegation and memory figures could not be counted: {describe(exc).line}")
        return None
