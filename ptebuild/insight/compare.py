"""The change of a program's figures between two releases (``ptebuild diff OLD NEW``).

For each program in both: its ``.pte`` and ``.ptd`` bytes, its delegated fraction, its planned
memory (all methods) and its check's figures (the worst ``max_abs_error`` and the lowest
``cosine`` over every output and size, as the record's ``checked`` summary keeps them:
:class:`ptebuild.figures.CheckSummary`), before and after. A figure one side lacks is None (an
older release, a program without a check). :meth:`FiguresChange.worse` names what grew or fell
(more bytes, a smaller delegated fraction: operators fell back to kernels, more planned memory,
a check further from eager than noise: the error doubled above 1e-5, or the cosine fell by more
than 1e-5), so that review sees it; a change the figure's printed precision does not show is left out.

JSON (:meth:`FiguresChange.to_json`): each figure as ``{"before": x, "after": y}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ptebuild.insight.delegation import percent
from ptebuild.insight.program import ProgramInsight, format_bytes

Pair = tuple[float | None, float | None]


@dataclass(frozen=True)
class ReleaseFigures:
    """One program's figures in one release, as a diff compares them (None: unknown there)."""

    pte: float | None = None
    ptd: float | None = None
    delegated: float | None = None
    planned: float | None = None
    max_abs_error: float | None = None
    """The check's worst error (None: no check figures)."""
    cosine: float | None = None
    """The check's lowest cosine."""

    @classmethod
    def of(cls, figures: ProgramInsight | None, checked: Mapping[str, Any] | None = None,
           pte_bytes: int | None = None, ptd_bytes: int | None = None) -> ReleaseFigures:
        """From a program's figures and what its check proves (``CheckSummary.to_json()``, the
        record's ``checked``); ``pte_bytes``/``ptd_bytes`` (the files' sizes, always known in a
        release) stand in where the figures have no size split."""
        f = figures or ProgramInsight()
        checked = checked or {}
        return cls(
            pte=_pte(f) if f.size is not None else _float(pte_bytes),
            ptd=_ptd(f) if f.size is not None else _float(ptd_bytes or None),
            delegated=_fraction(f),
            planned=_planned(f),
            max_abs_error=_number(checked.get("max_abs_error")),
            cosine=_number(checked.get("cosine")),
        )


@dataclass(frozen=True)
class FiguresChange:
    """A program's figures before and after."""

    pte: Pair
    ptd: Pair
    delegated: Pair
    planned: Pair
    max_abs_error: Pair
    cosine: Pair

    @classmethod
    def between(cls, before: ReleaseFigures | None, after: ReleaseFigures | None) -> FiguresChange:
        a, b = before or ReleaseFigures(), after or ReleaseFigures()
        return cls((a.pte, b.pte), (a.ptd, b.ptd), (a.delegated, b.delegated), (a.planned, b.planned),
                   (a.max_abs_error, b.max_abs_error), (a.cosine, b.cosine))

    @classmethod
    def of(cls, before: ProgramInsight | None, after: ProgramInsight | None,
           checked_before: Mapping[str, Any] | None = None, checked_after: Mapping[str, Any] | None = None) -> FiguresChange:
        return cls.between(ReleaseFigures.of(before, checked_before), ReleaseFigures.of(after, checked_after))

    def worse(self) -> list[str]:
        """What got worse: ``grew``, ``fell back to kernels``..., one phrase each."""
        found = []
        if _up(self.pte) or _up(self.ptd):
            found.append("grew")
        if _down(self.delegated):
            found.append("fell back to kernels")
        if _up(self.planned):
            found.append("plans more memory")
        if _further(self.max_abs_error, self.cosine):
            found.append("checks further from eager")
        return found

    def lines(self) -> list[str]:
        """One line per figure that is known on either side and changed (``same`` when none did)."""
        out = []
        for label, pair, text in (
            (".pte", self.pte, _bytes), (".ptd", self.ptd, _bytes), ("delegated", self.delegated, percent),
            ("planned memory", self.planned, _bytes), ("check max error", self.max_abs_error, _error), ("check cosine", self.cosine, _cosine),
        ):
            before, after = pair
            if before == after or text(before) == text(after):
                continue  # a change the figure's precision does not show is noise
            change = ""
            if before is not None and after is not None:
                if label == "delegated":
                    change = f" ({100 * (after - before):+.1f} points)"
                elif label in (".pte", ".ptd", "planned memory") and before:
                    change = f" ({100 * (after - before) / before:+.1f}%)"
            out.append(f"{label} {text(before)} -> {text(after)}{change}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {name: {"before": pair[0], "after": pair[1]} for name, pair in (
            ("pte_bytes", self.pte), ("ptd_bytes", self.ptd), ("delegated", self.delegated), ("planned_bytes", self.planned),
            ("max_abs_error", self.max_abs_error), ("cosine", self.cosine))} | {"worse": self.worse()}


def _pte(f: ProgramInsight) -> float | None:
    return float(f.size.pte) if f.size is not None else None


def _ptd(f: ProgramInsight) -> float | None:
    return float(f.size.ptd_bytes) if f.size is not None and f.size.ptd else None


def _fraction(f: ProgramInsight) -> float | None:
    return f.delegation.fraction if f.delegation is not None else None


def _planned(f: ProgramInsight) -> float | None:
    planned = f.planned_bytes
    return float(planned) if planned is not None else None


ERROR_FLOOR = 1e-5
"""A check's max error below this is rounding, not a change worth naming."""
COSINE_DROP = 1e-5


def _further(error: Pair, cosine: Pair) -> bool:
    """The check's figures moved away from eager by more than noise: the max error at least
    doubled and above :data:`ERROR_FLOOR`, or the cosine fell by more than :data:`COSINE_DROP`."""
    (e0, e1), (c0, c1) = error, cosine
    grew = e0 is not None and e1 is not None and e1 > max(2 * e0, ERROR_FLOOR)
    fell = c0 is not None and c1 is not None and c1 < c0 - COSINE_DROP
    return grew or fell


def _up(pair: Pair) -> bool:
    return pair[0] is not None and pair[1] is not None and pair[1] > pair[0]


def _down(pair: Pair) -> bool:
    return pair[0] is not None and pair[1] is not None and pair[1] < pair[0]


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _bytes(value: float | None) -> str:
    return "-" if value is None else format_bytes(int(value))


def _error(value: float | None) -> str:
    return "-" if value is None else f"{value:.2e}"


def _cosine(value: float | None) -> str:
    return "-" if value is None else f"{value:.6f}"
