"""A check's figures as typed values: read back as written, old entries still readable, and the
summary a program's report and record state (verdict, tolerances, data)."""

from __future__ import annotations

import pytest

from ptebuild.figures import (
    CheckSummary,
    GenerationFigures,
    MethodGeneration,
    OutputFigures,
    StructuralFigures,
    Verdict,
    read_figures,
)
from ptebuild.jsonable import JsonShapeError


def figure(**changes) -> OutputFigures:
    base: dict = {"method": "forward", "sizes": {"batch": 2}, "output": 0, "max_abs_error": 1e-3, "cosine": 0.9999,
                  "dtype": "bfloat16", "atol": 1e-4, "rtol": 0.25, "min_cosine": 0.999, "worst_excess": 0.2, "magnitude": 0.15}
    return OutputFigures(**{**base, **changes})


def test_figures_round_trip_and_old_entries_read_as_passed():
    f = figure(data="samples", samples=8, top1=0.875, sizes={})
    assert OutputFigures.from_json(f.to_json()) == f
    old = {"method": "forward", "sizes": {"batch": 1}, "output": 0, "max_abs_error": 2e-7, "cosine": 1.0}
    read = OutputFigures.from_json(old)
    assert read.verdict is Verdict.PASSED and read.data == "random" and read.dtype == ""


def test_the_summary_states_verdict_tolerances_and_data():
    figures = [figure(), figure(sizes={"batch": 8}, max_abs_error=0.0156, cosine=0.9998),
               figure(sizes={}, data="samples", samples=12, top1=0.9)]
    summary = CheckSummary.of(figures)
    assert summary is not None
    assert summary.verdict is Verdict.PASSED and summary.max_abs_error == 0.0156 and summary.samples == 12
    assert summary.tolerances == {"bfloat16": {"atol": 1e-4, "rtol": 0.25, "min_cosine": 0.999}}
    assert summary.random_sizes == ({"batch": 2}, {"batch": 8}) and summary.top1 == 0.9
    assert summary.data_words() == "random inputs at batch 2; batch 8; 12 samples"
    assert CheckSummary.of([StructuralFigures("forward", {"structural": True})]) is None


def test_an_output_that_proves_nothing_everywhere_makes_the_check_prove_nothing():
    nothing = figure(verdict=Verdict.PROVES_NOTHING, reason="eager PyTorch's output is all zeros")
    summary = CheckSummary.of([nothing, figure(output=1)])
    assert summary is not None and summary.verdict is Verdict.PROVES_NOTHING
    assert summary.reasons == ("method 'forward' output 0: eager PyTorch's output is all zeros",)
    assert summary.to_json()["way_out"].startswith("give the model its real weights")
    # Proven on samples: the output is checked after all.
    proven = CheckSummary.of([nothing, figure(sizes={}, data="samples", samples=3)])
    assert proven is not None and proven.verdict is Verdict.PASSED


def generation(method: str = "forward") -> list[GenerationFigures]:
    common = {"method": method, "output": 0, "dtype": "float32", "cosine": 0.99999, "max_abs_error": 2e-5}
    return [GenerationFigures(**common, sizes={"prompt_tokens": 8}, stage="prefill"),
            GenerationFigures(**common, sizes={"decode_steps": 16}, stage="decode", tokens=16, tokens_agreed=15,
                              tokens_exact=14, min_token_agreement=0.9)]


def test_every_kind_of_figures_is_read_back_as_its_own_type():
    structural = StructuralFigures("forward", {"structural": True, "delegate": "CoreMLBackend", "delegates": 1})
    written = [figure(), *generation(), structural]
    read = [read_figures(f.to_json()) for f in written]
    assert read == written
    assert [type(f) for f in read] == [OutputFigures, GenerationFigures, GenerationFigures, StructuralFigures]
    assert structural.to_json() == {"method": "forward", "structural": True, "delegate": "CoreMLBackend", "delegates": 1}


def test_a_generation_check_is_summed_per_method_in_the_summary():
    summary = CheckSummary.of([*generation("lora"), *generation("forward")])
    assert summary is not None
    assert summary.generation == (MethodGeneration("lora", 8, 16, 15), MethodGeneration("forward", 8, 16, 15))
    assert summary.to_json()["generation"][0] == {"method": "lora", "prompt_tokens": 8, "steps": 16, "tokens_agreed": 15}
    assert "generation" not in CheckSummary.of([figure()]).to_json()


def test_figures_that_cannot_be_read_say_where():
    with pytest.raises(JsonShapeError, match=r"CheckFigures.verdict: 'maybe' is not one of"):
        read_figures({**figure().to_json(), "verdict": "maybe"})
