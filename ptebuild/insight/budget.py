"""Budgets: the largest ``.pte`` and ``.ptd``, the smallest delegated fraction and the largest
planned memory a program may have, and the verdict on its figures.

In the manifest, per program or in ``[defaults]`` (a program's keys override the defaults' one
by one)::

    budget = { max_pte = "2 MiB", max_ptd = "64 MiB", min_delegated = 0.95, max_planned_memory = "8 MiB" }

and per method of a program of several methods (``min_delegated`` and ``max_planned_memory`` of
that method alone)::

    budget.methods.audio_encoder = { min_delegated = 0.5 }
    budget.methods.text_decoder = { max_planned_memory = "4 MiB" }

Sizes are byte counts or strings with a unit (``"512 KiB"``, ``"2 MiB"``, ``"1.5 GiB"``: powers
of 1024; ``"500 KB"``, ``"2 MB"``: powers of 1000; :func:`ptebuild.sizes.parse_size`).
``min_delegated`` is a fraction (0 to 1) of operator nodes, as :mod:`.delegation` counts it;
``max_planned_memory`` bounds all the program's methods together (:attr:`~.figures.ProgramInsight.planned_bytes`).

A budget is not part of a program's action key: it is judged on the figures after the program
is built or restored, so a changed budget judges a cached program again without lowering it.
An overrun is one line at the limit's place in the manifest (``programs.X.budget.max_pte``, or
``defaults.budget.max_pte`` where the program inherits it) with the figure, the budget, and
what to do.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from ptebuild.insight.delegation import TUPLE_ACCESS
from ptebuild.insight.program import ProgramInsight, format_bytes
from ptebuild.jsonable import Jsonable
from ptebuild.plan import Budget, Limit

SIZE_LIMITS = ("max_pte", "max_ptd", "max_planned_memory")
LIMITS = ("max_pte", "max_ptd", "min_delegated", "max_planned_memory")
METHOD_LIMITS = ("min_delegated", "max_planned_memory")
"""What ``methods.M`` bounds of one method."""


def parse_size(value: object) -> int:
    """Bytes of a budget's size: an int of bytes, or a string with a unit. ValueError otherwise."""
    from ptebuild.errors import UsageError
    from ptebuild.sizes import parse_size as parse

    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    try:
        if isinstance(value, str):
            return parse(value)
    except UsageError:
        pass
    raise ValueError(f"{value!r} is not a size: give bytes, or a number with a unit (\"512 KiB\", \"2 MiB\", \"1.5 GiB\", \"500 KB\")")


def merged_budget(defaults: Mapping[str, Any] | None, program: Mapping[str, Any] | None, name: str,
                  methods: Collection[str] = ()) -> Budget | None:
    """The budget of program ``name``: its own limits over the defaults' (both already validated:
    sizes in bytes, fractions as floats), then its methods' (``methods.M``: the program's own, over
    the defaults' for a method of that name that the program holds: ``methods``). None when nothing
    sets a limit."""
    limits = []
    for limit in LIMITS:
        if program and program.get(limit) is not None:
            limits.append(Limit(limit, float(program[limit]), f"programs.{name}.budget"))
        elif defaults and defaults.get(limit) is not None:
            limits.append(Limit(limit, float(defaults[limit]), "defaults.budget"))
    own, inherited = (program or {}).get("methods") or {}, (defaults or {}).get("methods") or {}
    for method in sorted({*own, *(m for m in inherited if m in methods)}):
        for limit in METHOD_LIMITS:
            if (own.get(method) or {}).get(limit) is not None:
                limits.append(Limit(limit, float(own[method][limit]), f"programs.{name}.budget.methods.{method}", method))
            elif (inherited.get(method) or {}).get(limit) is not None:
                limits.append(Limit(limit, float(inherited[method][limit]), f"defaults.budget.methods.{method}", method))
    return Budget(tuple(limits)) if limits else None


def limit_text(limit: Limit) -> str:
    """A limit's value as a message says it: ``95%``, ``2.0 MiB (2,097,152 bytes)``."""
    if limit.name == "min_delegated":
        return f"{100 * limit.value:g}%"
    return _bytes_text(int(limit.value))


@dataclass(frozen=True)
class Overrun:
    """A limit a program's figures break (or cannot be judged against)."""

    limit: Limit
    message: str
    """``<the figure>, over the budget of <the limit>; <what to do>``."""


    @property
    def breach(self) -> BudgetBreach:
        """What a build's result keeps of it."""
        return BudgetBreach(self.limit.location, self.message)


@dataclass(frozen=True)
class BudgetBreach(Jsonable):
    """A budget limit a program breaks, as its build's result and ``--json`` keep it:
    ``{"limit": "programs.X.budget.max_pte", "message": "..."}``."""

    limit: str
    """Where the limit is set in the manifest."""
    message: str


def judge(figures: ProgramInsight, budget: Budget, pte_name: str) -> tuple[Overrun, ...]:
    """The limits of ``budget`` that ``figures`` break, in :data:`LIMITS` order."""
    found = []
    for limit in budget.limits:
        problem = _judge(limit, figures, pte_name)
        if problem is not None:
            found.append(Overrun(limit, problem))
    return tuple(found)


def _judge(limit: Limit, figures: ProgramInsight, pte_name: str) -> str | None:
    if limit.method:
        return _judge_method(limit, figures)
    size = figures.size
    if limit.name in SIZE_LIMITS and size is None:
        return f"no size figures for {pte_name} (its files were not read); build it again"
    if limit.name == "max_pte" and size is not None and size.pte > limit.value:
        biggest = max(size.pte_parts(), key=lambda part: part[1], default=("plan", 0))
        return (f"{pte_name} is {_bytes_text(size.pte)}, over the budget of {limit_text(limit)} (the largest part: "
                f"{biggest[0]} {format_bytes(biggest[1])}); {_shrink(biggest[0])}, or raise the budget")
    if limit.name == "max_ptd" and size is not None:
        largest = size.largest_ptd
        if largest is not None and largest.size > limit.value:
            shared = f", shared with {', '.join(largest.shared_with)}" if largest.shared_with else ""
            return (f"{largest.name} is {_bytes_text(largest.size)}{shared}, over the budget of {limit_text(limit)}; "
                    "quantize the weights, split the data name, or raise the budget")
    if limit.name == "max_planned_memory" and size is not None:
        planned = figures.planned_bytes or 0
        if planned > limit.value:
            methods = ", ".join(f"{m.method} {format_bytes(m.planned_bytes)}" for m in figures.memory if m.planned_bytes)
            return (f"the methods plan {_bytes_text(planned)} together ({methods}), over the budget of {limit_text(limit)}; "
                    "lower the dynamic dims' max, or raise the budget")
    if limit.name == "min_delegated":
        delegation = figures.delegation
        if delegation is None:
            return "no delegation figures for this program (its action result has none); build it again with --no-cache"
        fraction = delegation.fraction
        if fraction is not None and fraction < limit.value:
            left = sorted(delegation.non_delegated(), key=lambda item: (-item[1], item[0]))
            shown = ", ".join(f"{op} ×{n}" for op, n in left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
            return (f"{100 * fraction:.1f}% of its operator nodes are delegated, under the budget of {limit_text(limit)} "
                    f"(left to kernels: {shown}); make the model use operators the backend takes, or lower the budget")
    return None


def _judge_method(limit: Limit, figures: ProgramInsight) -> str | None:
    """A limit of one method (``methods.M``): its planned memory, or its delegated fraction."""
    method = limit.method
    if limit.name == "max_planned_memory":
        memory = next((m for m in figures.memory if m.method == method), None)
        if memory is None:
            return f"no memory figures for method {method!r} (its action result has none); build it again with --no-cache"
        if memory.planned_bytes > limit.value:
            return (f"method {method!r} plans {_bytes_text(memory.planned_bytes)}, over the budget of {limit_text(limit)}; "
                    "lower its dynamic dims' max, or raise the budget")
        return None
    delegation = figures.delegation.method(method) if figures.delegation is not None else None
    if delegation is None:
        return f"no delegation figures for method {method!r} (its action result has none); build it again with --no-cache"
    fraction = delegation.fraction
    if fraction is not None and fraction < limit.value:
        left = sorted(((op, n) for op, n in delegation.non_delegated if op != TUPLE_ACCESS), key=lambda item: (-item[1], item[0]))
        shown = ", ".join(f"{op} ×{n}" for op, n in left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
        return (f"{100 * fraction:.1f}% of method {method!r}'s operator nodes are delegated, under the budget of "
                f"{limit_text(limit)} (left to kernels: {shown}); make it use operators the backend takes, or lower the budget")
    return None


def _shrink(part: str) -> str:
    """What makes the largest part of a ``.pte`` smaller."""
    if part in ("constants", "named data"):
        return "move the weights into a .ptd (data_name), or quantize them"
    if part.startswith("delegate "):
        return "quantize the weights the delegate holds, or keep them in a .ptd (data_name)"
    if part == "plan":
        return "the plan (methods, values, instructions) is most of it: export fewer methods or a smaller graph"
    return "rebuild it"


def _bytes_text(n: int) -> str:
    exact = f"{n:,} bytes"
    short = format_bytes(n)
    return exact if short.endswith(" B") else f"{short} ({exact})"
