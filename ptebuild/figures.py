"""A check's figures and verdict, typed: what each output measured, and what the check proves.

A program's check (:mod:`ptebuild.lowering.check`) compares every output of every method with
eager PyTorch, on generated inputs at each size it checks (``data = "random"``) and on the
method's samples (``data = "samples"``). Each comparison is an :class:`OutputFigures`: the output's
dtype, the tolerance it was held to (``atol``, ``rtol``, ``min_cosine``: :mod:`ptebuild.tolerances`),
the max absolute error, the worst share of its bound an element used (``worst_excess``: 1.0 is at
the bound), the cosine similarity, on samples the top-1 agreement of class scores, and a
:class:`Verdict`:

- ``passed``: within the tolerance, on a reference that can tell a wrong program from a right one;
- ``proves-nothing``: within the tolerance, but eager PyTorch's output is degenerate (all zeros,
  constant, or so small that an all-zero output would pass): the check cannot fail, so it says
  nothing about the program (``reason`` says why);
- ``failed``: never in a published result (the check raises instead); kept for completeness.

As JSON (in action results, ``build --json``'s ``check`` lists, the daemon's messages)::

    {"method": "forward", "sizes": {"batch": 2}, "output": 0, "max_abs_error": 3.1e-3,
     "cosine": 0.99987, "dtype": "bfloat16", "atol": 1e-5, "rtol": 0.25, "min_cosine": 0.999,
     "worst_excess": 0.06, "magnitude": 0.15, "data": "random", "samples": 0, "top1": null,
     "verdict": "passed", "reason": ""}

A language model's generation check writes one entry per stage (:class:`GenerationFigures`),
the same fields and ``"stage": "prefill" | "decode"``, with the decode's ``tokens``,
``tokens_agreed``, ``tokens_exact``, ``min_token_agreement``, and ``runner_tokens`` where ExecuTorch's
runner generated after it; a check without numbers (a delegate's structure, a Windows DLL's
imports) writes its facts (:class:`StructuralFigures`: ``method`` and whatever it found). Entries
are read back as their own type (:func:`read_figures`), their JSON generated from their fields
(:mod:`ptebuild.jsonable`). Entries written before these fields existed (``method``, ``sizes``,
``output``, ``max_abs_error``, ``cosine`` only) read as passed figures of unknown dtype. Nothing
here imports torch.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ptebuild.jsonable import Jsonable


class Verdict(str, enum.Enum):
    PASSED = "passed"
    PROVES_NOTHING = "proves-nothing"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


_RANK = {Verdict.PASSED: 0, Verdict.PROVES_NOTHING: 1, Verdict.FAILED: 2}


@dataclass(frozen=True)
class CheckFigures(Jsonable):
    """One entry of a check's figures, about one method: :class:`OutputFigures` (a numeric check),
    :class:`GenerationFigures` (a generation check's stage) or :class:`StructuralFigures` (a check
    without numbers), told apart in JSON by their keys."""

    method: str

    @classmethod
    def json_variant(cls, data: Mapping[str, Any]) -> type[CheckFigures]:
        if "max_abs_error" not in data:
            return StructuralFigures
        return GenerationFigures if "stage" in data else OutputFigures


@dataclass(frozen=True)
class OutputFigures(CheckFigures):
    """One output of one method, compared with eager PyTorch on one size's generated inputs or on
    the method's samples."""

    sizes: dict[str, int]
    """The dynamic dims' sizes of the generated inputs (``{}`` for samples and static methods)."""
    output: int
    max_abs_error: float
    cosine: float
    dtype: str = ""
    atol: float = 0.0
    rtol: float = 0.0
    min_cosine: float = -1.0
    worst_excess: float = 0.0
    """The largest ``|a - e| / (atol + rtol * max(|e|, mean |e|))`` over the elements (<= 1 passes)."""
    magnitude: float = 0.0
    """Eager PyTorch's mean ``|e|`` over the output."""
    data: str = "random"
    """``random`` (generated inputs) or ``samples`` (the method's samples)."""
    samples: int = 0
    """How many samples (``data = "samples"``)."""
    top1: float | None = None
    """On samples, for class scores (a float output whose last dim is > 1): the share of rows whose
    top class is eager PyTorch's (all rows; the check judges a program wrong only on the rows whose
    top class eager picks by more than the tolerance: :func:`ptebuild.lowering.check.top1_agreement`)."""
    verdict: Verdict = Verdict.PASSED
    reason: str = ""
    """Why the output proves nothing (or failed), in words."""


@dataclass(frozen=True)
class GenerationFigures(OutputFigures):
    """A language model's generation check, one stage of it: the prefill of a seeded prompt
    (``sizes = {"prompt_tokens": N}``) or the greedy decode steps that follow it
    (``{"decode_steps": N}``), each stage's logits compared with eager PyTorch's as any output is."""

    stage: str = "prefill"
    """``prefill`` or ``decode``."""
    tokens: int = 0
    """Decode: the steps taken (each one token)."""
    tokens_agreed: int = 0
    """Decode: the steps whose token is eager PyTorch's, or within the tolerance of its best."""
    tokens_exact: int = 0
    """Decode: the steps whose token is exactly eager PyTorch's argmax."""
    min_token_agreement: float | None = None
    """Decode: the share of steps that must agree."""
    prompt_seed: int = 0
    runner_tokens: int | None = None
    """The last method's decode: the tokens ExecuTorch's runner generated from the runner's prompt."""
    runner_note: str = ""
    """Why the runner was asked for fewer tokens than usual, in words; empty otherwise."""


@dataclass(frozen=True)
class StructuralFigures(CheckFigures):
    """What a check without numbers found in one method (a delegate's payload checked against the
    plan: :mod:`ptebuild.lowering.structure`; a Windows program's DLL imports): its facts, as the
    check wrote them; ``method`` names the method."""

    facts: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, **self.facts}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StructuralFigures:
        return cls(str(data.get("method", "")), {k: v for k, v in data.items() if k != "method"})


Figures = CheckFigures
"""One entry of a check's figures: numbers (a numeric or generation check) or facts (a structural one)."""


def read_figures(data: Mapping[str, Any]) -> CheckFigures:
    """One entry of a check's figures as any build wrote it (older ones included)."""
    return CheckFigures.from_json(data)


def as_figures(found: Any) -> CheckFigures:
    """A check's figure as a backend's check returns it (an :class:`OutputFigures`, or a value of
    its own with ``to_json``: a structural check's), typed."""
    if isinstance(found, CheckFigures):
        return found
    return StructuralFigures.from_json(found.to_json())


def is_numeric(entry: Mapping[str, Any]) -> bool:
    """True for error figures (a structural check's entries have none)."""
    return "max_abs_error" in entry


@dataclass(frozen=True)
class CheckSummary:
    """What a program's check proves, over all its figures: the verdict (the worst of each
    output's, an output proving nothing only where it proved nothing at every size and sample),
    the reasons, the tolerances by dtype, the data it ran on."""

    verdict: Verdict
    reasons: tuple[str, ...] = ()
    """``method 'forward' output 0: eager PyTorch's output is all zeros ...``, for each output that
    proves nothing."""
    tolerances: dict[str, dict[str, float]] = field(default_factory=dict)
    """dtype -> ``{"atol", "rtol", "min_cosine"}`` the outputs of that dtype were held to."""
    random_sizes: tuple[dict[str, int], ...] = ()
    """The sizes of the generated inputs (``({},)`` for static methods)."""
    samples: int = 0
    """How many samples the check ran (all methods)."""
    max_abs_error: float = 0.0
    cosine: float = 1.0
    top1: float | None = None
    """The lowest top-1 agreement of class scores on samples, if any was measured."""
    generation: tuple[MethodGeneration, ...] = ()
    """A generation check's tokens, per method it checked (a language model's)."""

    @classmethod
    def of(cls, entries: Iterable[Figures]) -> CheckSummary | None:
        """The summary of a check's figures; None when none are error figures."""
        figures = [e for e in entries if isinstance(e, OutputFigures)]
        if not figures:
            return None
        by_output: dict[tuple[str, int], list[OutputFigures]] = {}
        for f in figures:
            by_output.setdefault((f.method, f.output), []).append(f)
        verdict, reasons = Verdict.PASSED, []
        for (method, output), group in sorted(by_output.items()):
            worst = max((f.verdict for f in group), key=_RANK.__getitem__)
            if worst is Verdict.PROVES_NOTHING and any(f.verdict is Verdict.PASSED for f in group):
                worst = Verdict.PASSED  # proven at another size or on samples
            if worst is Verdict.PROVES_NOTHING:
                reason = next(f.reason for f in group if f.verdict is Verdict.PROVES_NOTHING)
                reasons.append(f"method {method!r} output {output}: {reason}")
            verdict = max(verdict, worst, key=_RANK.__getitem__)
        tolerances = {f.dtype or "unknown": {"atol": f.atol, "rtol": f.rtol, "min_cosine": f.min_cosine} for f in figures}
        sizes: list[dict[str, int]] = []
        for f in figures:
            if f.data == "random" and f.sizes not in sizes:
                sizes.append(f.sizes)
        samples = {f.method: f.samples for f in figures if f.data == "samples"}
        top1 = [f.top1 for f in figures if f.top1 is not None]
        return cls(
            verdict=verdict,
            reasons=tuple(reasons),
            tolerances=dict(sorted(tolerances.items())),
            random_sizes=tuple(sizes),
            samples=sum(samples.values()),
            max_abs_error=max(f.max_abs_error for f in figures),
            cosine=min(f.cosine for f in figures),
            top1=min(top1) if top1 else None,
            generation=MethodGeneration.of(f for f in figures if isinstance(f, GenerationFigures)),
        )

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "verdict": self.verdict.value,
            "tolerances": {k: dict(v) for k, v in self.tolerances.items()},
            "data": {"random": [dict(s) for s in self.random_sizes], "samples": self.samples},
            "max_abs_error": self.max_abs_error,
            "cosine": self.cosine,
        }
        if self.reasons:
            data["reasons"] = list(self.reasons)
        if self.verdict is Verdict.PROVES_NOTHING:
            data["way_out"] = WAY_OUT
        if self.top1 is not None:
            data["top1"] = self.top1
        if self.generation:
            data["generation"] = [g.to_json() for g in self.generation]
        return data

    def data_words(self) -> str:
        """``random inputs at batch 1, 2, 8; 12 samples``: the data the check ran on."""
        sizes = [", ".join(f"{k} {v}" for k, v in s.items()) for s in self.random_sizes]
        words = "random inputs" + (f" at {'; '.join(sizes)}" if any(sizes) else "")
        return words + (f"; {self.samples} sample{'s' if self.samples != 1 else ''}" if self.samples else "")

    def tolerance_words(self) -> str:
        """``float32: atol 0.001, rtol 0.0001, cosine >= 0.9999``, one clause per dtype."""
        from ptebuild.tolerances import Tolerance

        return "; ".join(f"{dtype}: {Tolerance(t['atol'], t['rtol'], t['min_cosine'])}" for dtype, t in self.tolerances.items())


@dataclass(frozen=True)
class MethodGeneration(Jsonable):
    """One method's generation check in figures a table shows: ``prompt 8 + 16 steps, tokens 16/16``."""

    method: str
    prompt_tokens: int
    steps: int
    tokens_agreed: int

    @classmethod
    def of(cls, figures: Iterable[GenerationFigures]) -> tuple[MethodGeneration, ...]:
        prompts: dict[str, int] = {}
        found = []
        for f in figures:
            if f.stage == "prefill":
                prompts[f.method] = prompts.get(f.method, 0) + f.sizes.get("prompt_tokens", 0)
            elif f.stage == "decode":
                found.append(f)
        return tuple(cls(f.method, prompts.get(f.method, 0), f.tokens, f.tokens_agreed) for f in found)


WAY_OUT = ("give the model its real weights (models.M.weights), or real inputs (models.M.methods.F.samples) "
           "on which its outputs are not degenerate")
"""What to do about a check that proves nothing."""
