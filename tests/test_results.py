"""Action and target results (:mod:`ptebuild.results`): typed values that survive JSON whole.

An action result goes to a cache tier and comes back as the same value, its check figures, its
insight and its stage spans still typed (:mod:`ptebuild.figures`, :mod:`ptebuild.insight`); one
written by an older ptebuild (figures of five keys, no insight, no stages) still reads; a document
that is not one is refused with TypeError, KeyError or ValueError (what the cache front end
catches). A target result's JSON is ``build --json``'s entry, and reads back as the result it was.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from insight_data import figures as insight_figures

from ptebuild.deps import Dependencies
from ptebuild.figures import CheckSummary, GenerationFigures, OutputFigures, StructuralFigures, Verdict
from ptebuild.insight.budget import BudgetBreach
from ptebuild.insight.program import ProgramInsight
from ptebuild.insight.stages import Stage, StageSpan
from ptebuild.results import ACTION_FORMAT, ACTION_VERSION, ActionResult, FailureKind, OutputFile, Source, Status, TargetResult

PTE = OutputFile("policy_xnnpack.pte", "a" * 64, 75_040)
PTD = OutputFile("policy_weights.ptd", "b" * 64, 40_000)

NUMERIC = OutputFigures("forward", {"batch": 2}, 0, 3.1e-3, 0.99987, dtype="bfloat16", atol=1e-5, rtol=0.25,
                        min_cosine=0.999, worst_excess=0.06, magnitude=0.15)
ON_SAMPLES = OutputFigures("forward", {}, 0, 1e-4, 0.99999, dtype="float32", data="samples", samples=12, top1=0.75)
DEGENERATE = OutputFigures("score", {"batch": 2}, 1, 0.0, 1.0, dtype="float32", verdict=Verdict.PROVES_NOTHING,
                           reason="eager PyTorch's output is all zeros")
DECODE = GenerationFigures("forward", {"decode_steps": 16}, 0, 0.01, 0.9999, dtype="float32", stage="decode", tokens=16,
                           tokens_agreed=15, tokens_exact=14, min_token_agreement=0.9, prompt_seed=3, runner_tokens=16)
STRUCTURAL = StructuralFigures("forward", {"delegates": 2, "payload": "XnnpackBackend"})

OLD_FIGURES = {"method": "forward", "sizes": {"batch": 2}, "output": 0, "max_abs_error": 2.5e-6, "cosine": 0.99999}
"""One entry of a check's figures as ptebuild wrote it before figures carried their tolerance and verdict."""


def action(**changes) -> ActionResult:
    """An action result with every field set, each typed value among them."""
    full = ActionResult(
        key="0123456789abcdef0123456789abcdef", target="policy_xnnpack", kind="program", outputs=(PTE, PTD),
        inputs={"manifest.model.factory": "policy:make", "source:policy.py": "c" * 64},
        deps=Dependencies(sources=(("layers/blocks.py", "d" * 64),), dists=(("torchao", "0.18.0"),)),
        backend="xnnpack", figures=(NUMERIC, ON_SAMPLES, DEGENERATE, DECODE, STRUCTURAL), check="executorch-runtime",
        delegates={"forward": 1, "score": 2}, lower_seconds=12.345, built_on="builder-1",
        insight=insight_figures().worker_part(),
        stages=(StageSpan(Stage.IMPORT, 0.0, 0.81), StageSpan(Stage.EXPORT, 0.81, 2.4), StageSpan(Stage.LOWER, 2.4, 11.875)),
    )
    return replace(full, **changes)


def through_json(document: dict) -> dict:
    """``document`` as a cache tier gives it back: written as JSON text and parsed again."""
    return json.loads(json.dumps(document))


def test_an_action_result_round_trips_through_json_with_its_typed_values():
    result = action()
    again = ActionResult.from_json(through_json(result.to_json()))
    assert again == result
    assert [type(f) for f in again.figures] == [OutputFigures, OutputFigures, OutputFigures, GenerationFigures, StructuralFigures]
    assert again.figures[2].verdict is Verdict.PROVES_NOTHING
    assert isinstance(again.insight, ProgramInsight) and again.insight.delegation == result.insight.delegation
    assert [s.stage for s in again.stages] == [Stage.IMPORT, Stage.EXPORT, Stage.LOWER]


def test_the_json_is_the_documented_document():
    document = action(lower_seconds=12.34567).to_json()
    assert (document["format"], document["version"]) == (ACTION_FORMAT, ACTION_VERSION) == ("ptebuild-action", 2)
    assert document["outputs"][0] == {"name": "policy_xnnpack.pte", "sha256": "a" * 64, "bytes": 75_040}
    assert document["deps"] == {"sources": {"layers/blocks.py": "d" * 64}, "dists": {"torchao": "0.18.0"}}
    assert document["figures"][0]["verdict"] == "passed" and document["figures"][4] == {
        "method": "forward", "delegates": 2, "payload": "XnnpackBackend"}
    assert document["lower_seconds"] == 12.346
    assert document["stages"][1] == {"stage": "export", "start": 0.81, "end": 2.4}
    assert document["insight"]["size"] is None  # the worker's half: the files say the rest
    bare = action(insight=None, stages=()).to_json()
    assert "insight" not in bare and "stages" not in bare


def test_an_action_result_written_by_an_older_ptebuild_still_reads():
    """Figures of five keys, and no deps, insight, stages, check, delegates or built_on."""
    older = {
        "format": "ptebuild-action", "version": 2, "key": "f" * 32, "target": "tiny_portable", "kind": "program",
        "backend": "portable", "outputs": [{"name": "tiny_portable.pte", "sha256": "e" * 64, "bytes": 1234}],
        "figures": [OLD_FIGURES, {**OLD_FIGURES, "output": 1, "max_abs_error": 4e-6, "cosine": 0.99998}],
    }
    result = ActionResult.from_json(older)
    assert result.outputs == (OutputFile("tiny_portable.pte", "e" * 64, 1234),)
    assert all(type(f) is OutputFigures for f in result.figures)
    first = result.figures[0]
    assert (first.method, first.sizes, first.output, first.max_abs_error, first.cosine) == ("forward", {"batch": 2}, 0, 2.5e-6, 0.99999)
    assert (first.dtype, first.verdict, first.data) == ("", Verdict.PASSED, "random")
    assert (result.insight, result.stages, result.deps, result.check, result.built_on) == (None, (), Dependencies(), "", "")
    summary = CheckSummary.of(result.figures)
    assert summary is not None and summary.verdict is Verdict.PASSED and summary.max_abs_error == 4e-6
    assert summary.tolerances == {"unknown": {"atol": 0.0, "rtol": 0.0, "min_cosine": -1.0}}


def _without(key: str) -> dict:
    document = action().to_json()
    del document[key]
    return document


NOT_ACTION_RESULTS = {
    "another-format": ({**action().to_json(), "format": "ptebuild-record"}, ValueError),
    "version-1": ({**action().to_json(), "version": 1}, ValueError),
    "version-3": ({**action().to_json(), "version": 3}, ValueError),
    "no-outputs": ({**action().to_json(), "outputs": []}, ValueError),
    "no-key": (_without("key"), KeyError),
    "no-target": (_without("target"), KeyError),
    "output-without-sha256": ({**action().to_json(), "outputs": [{"name": "a.pte", "bytes": 1}]}, KeyError),
    "size-as-text": ({**action().to_json(), "outputs": [{"name": "a.pte", "sha256": "a" * 64, "bytes": "1"}]}, TypeError),
    "inputs-a-list": ({**action().to_json(), "inputs": ["a"]}, TypeError),
    "deps-not-strings": ({**action().to_json(), "deps": {"sources": {"a.py": 1}}}, TypeError),
}


@pytest.mark.parametrize(("document", "error"), NOT_ACTION_RESULTS.values(), ids=NOT_ACTION_RESULTS.keys())
def test_a_document_that_is_not_an_action_result_is_refused(document, error):
    with pytest.raises(error):
        ActionResult.from_json(document)


@pytest.mark.parametrize("stages", ["lowering", [{"stage": "cooking", "start": 0, "end": 1}], [{"stage": "export"}], [7]])
def test_malformed_stages_read_as_none(stages):
    """Stage spans only inform (how long the next build takes): a bad list is dropped, not fatal."""
    document = {**action().to_json(), "stages": stages}
    assert ActionResult.from_json(document).stages == ()


def test_digests_and_outputs_by_name():
    result = action(outputs=(PTE, PTD, OutputFile("copy.pte", "a" * 64, 75_040)))
    assert result.digests == ["a" * 64, "b" * 64]
    assert result.output("policy_weights.ptd") == PTD
    assert result.output("policy_xnnpack.bpte") is None


@given(
    inputs=st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=5),
    delegates=st.dictionaries(st.text(min_size=1, max_size=10), st.integers(0, 1000), max_size=4),
    outputs=st.lists(st.tuples(st.text(min_size=1, max_size=20), st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
                               st.integers(0, 2**40)), min_size=1, max_size=4),
    seconds=st.integers(0, 10**7),
)
@settings(max_examples=60, deadline=None)
def test_any_action_result_reads_back_as_written(inputs, delegates, outputs, seconds):
    result = action(inputs=inputs, delegates=delegates, outputs=tuple(OutputFile(*o) for o in outputs), lower_seconds=seconds / 1000)
    assert ActionResult.from_json(through_json(result.to_json())) == result


@pytest.mark.parametrize("status", list(Status), ids=str)
def test_which_statuses_are_not_delivered(status):
    """``failed`` decides the exit code: every status that leaves a target undelivered is one."""
    undelivered = {"failed", "needs-gpu", "cannot-lower", "cannot-check", "over-budget"}
    assert status.failed is (status.value in undelivered)
    assert str(status) == status.value


def target(**changes) -> TargetResult:
    """A target result with every field its JSON holds set."""
    full = TargetResult(
        name="policy_xnnpack", kind="program", backend="xnnpack", out_dir="/work/out", status=Status.OVER_BUDGET, seconds=3.25,
        outputs=(PTE, PTD), figures=(NUMERIC, ON_SAMPLES, DECODE, STRUCTURAL), check="executorch-runtime",
        methods=({"name": "forward", "inputs": [{"name": "x", "shape": ["batch", 6]}]},), message="over its budget",
        explain=["key changed: source:policy.py"], key="0123456789abcdef0123456789abcdef", source=Source.REMOTE,
        node="gpu-node-2", rebuild="same", insight=insight_figures(),
        budget=(BudgetBreach("programs.policy_xnnpack.budget.max_pte", "policy_xnnpack.pte is 6.0 KiB, over ..."),),
        brought_along="shares policy_weights.ptd with policy_portable",
    )
    return replace(full, **changes)


def test_a_target_result_round_trips_through_json_with_its_typed_values():
    """What a replayed no-op build reports is what the build it replays reported."""
    result = target()
    again = TargetResult.from_json(through_json(result.to_json()))
    assert again == result
    assert [type(f) for f in again.figures] == [OutputFigures, OutputFigures, GenerationFigures, StructuralFigures]
    assert isinstance(again.budget[0], BudgetBreach) and again.source is Source.REMOTE and again.status is Status.OVER_BUDGET
    assert again.size == result.size and again.delegation == result.delegation and again.memory == result.memory


def test_a_target_results_json_is_build_jsons_entry():
    document = target(out_dir="/work/out").to_json()
    assert document["status"] == "over-budget"
    assert document["outputs"][0] == {"path": "/work/out/policy_xnnpack.pte", "sha256": "a" * 64, "bytes": 75_040}
    assert {"delegation", "size", "memory"} <= set(document)  # the insight's parts, by the names --json prints
    assert document["budget"] == [{"limit": "programs.policy_xnnpack.budget.max_pte", "message": "policy_xnnpack.pte is 6.0 KiB, over ..."}]
    assert document["checked"]["verdict"] == "passed" and document["checked"]["data"]["samples"] == 12
    assert document["checked"]["generation"] == [{"method": "forward", "prompt_tokens": 0, "steps": 16, "tokens_agreed": 15}]
    bare = TargetResult("tiny", "shims", None, status=Status.BUILT).to_json()
    assert set(bare) == {"name", "kind", "backend", "status", "seconds", "methods", "outputs", "figures", "check", "key"}
    assert TargetResult.from_json(bare) == TargetResult("tiny", "shims", None, status=Status.BUILT)


def test_a_target_result_of_older_figures_reads_and_is_summarised():
    older = {"name": "tiny_portable", "kind": "program", "backend": "portable", "status": "cached",
             "outputs": [{"path": "out/tiny_portable.pte", "sha256": "e" * 64, "bytes": 1234}], "figures": [OLD_FIGURES]}
    result = TargetResult.from_json(older)
    assert result.out_dir == "out" and result.outputs == (OutputFile("tiny_portable.pte", "e" * 64, 1234),)
    assert result.insight is None and result.delegation is None and result.size is None and result.memory == ()
    assert result.checked is not None and result.checked.verdict is Verdict.PASSED


def test_checked_summarises_only_numeric_figures():
    assert target(figures=(STRUCTURAL,)).checked is None
    assert "checked" not in target(figures=(STRUCTURAL,)).to_json()
    proves_nothing = target(figures=(DEGENERATE,)).checked
    assert proves_nothing is not None and proves_nothing.verdict is Verdict.PROVES_NOTHING
    assert proves_nothing.reasons == ("method 'score' output 1: eager PyTorch's output is all zeros",)


def test_take_fills_in_what_the_action_produced():
    result = TargetResult("policy_xnnpack", "program", "xnnpack")
    produced = action()
    result.take(produced)
    assert (result.outputs, result.figures, result.check) == (produced.outputs, produced.figures, "executorch-runtime")
    assert result.failure is FailureKind.BUILD and result.status is Status.PENDING  # the builder decides those


def test_importing_results_imports_no_torch_executorch_or_pydantic():
    code = "import sys, ptebuild.results; print(sorted(m for m in ('torch', 'executorch', 'pydantic') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
