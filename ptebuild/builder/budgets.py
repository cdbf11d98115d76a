"""Budgets: each delivered program's figures judged against the limits its manifest sets.

After the programs are built, restored and published, every program delivered (built or cached)
gets its figures from its build record's entry (what the worker counted joined with what its
files say: :mod:`.insight`), and one that breaks its budget (:mod:`ptebuild.insight.budget`)
fails with one located line naming the first limit broken (the result's ``budget`` lists them
all). A cached program is judged as a new one is: the budget is not part of the action key, so
a changed budget needs no lowering. The files stay in place: the build fails, the folder is as
built. Nothing here imports torch or executorch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ptebuild.results import Status

if TYPE_CHECKING:
    from ptebuild.builder.context import BuildContext


def judge_budgets(context: BuildContext) -> None:
    """Give each delivered program its figures and fail those over budget (see the module's docstring)."""
    from ptebuild.insight.budget import judge
    from ptebuild.insight.program import ProgramInsight

    for program in context.plan.programs:
        result = context.results.get(program.name)
        entry = context.folder.entries.get(program.name)
        if result is None or entry is None or result.status not in (Status.BUILT, Status.CACHED):
            continue
        try:
            figures = ProgramInsight.from_json(entry.insight)
        except (KeyError, TypeError, ValueError):
            figures = ProgramInsight()
        result.insight = figures if entry.insight is not None else None
        if program.budget is None:
            continue
        overruns = judge(figures, program.budget, program.pte_name)
        if not overruns:
            continue
        result.status = Status.OVER_BUDGET
        result.budget = tuple(o.breach for o in overruns)
        first = overruns[0]
        more = f" (and {len(overruns) - 1} more: {', '.join(o.limit.name for o in overruns[1:])})" if len(overruns) > 1 else ""
        result.message = context.located(program.name, first.message + more, location=first.limit.location)
        context.report(program.name, "done", f"over budget: {first.limit.location}")
