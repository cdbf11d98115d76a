"""The check tells the truth: tolerances by dtype and magnitude, a wrong program named wrong (and
where it first diverges), a check that proves nothing said so, a program checked as it will run
(sizes in several orders on one loaded program), and real samples beside the generated inputs.

The rules are tested on tensors made here (fast); the programs, lowered and run in ExecuTorch's
runtime, from ``tests/manifests/checks.toml``: in this process where one program is enough, and
once per session through the command line for the report, the record and the log.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest
import torch

from ptebuild.errors import CheckError
from ptebuild.figures import Verdict
from ptebuild.lowering.check import (
    OrderDependent,
    WrongProgram,
    check_program,
    checked_figures,
    flatten_outputs,
    measure,
    run_orders,
)
from ptebuild.lowering.examples import flat_inputs, make_inputs
from ptebuild.plan import InputPlan, MethodPlan, ProgramPlan
from ptebuild.tolerances import Tolerance

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"


def plan(backend: str = "portable", atol: float = 1e-4, rtol: float = 1e-5, min_cosine: float = 0.99999,
         check_set: tuple[str, ...] = ()) -> ProgramPlan:
    method = MethodPlan("forward", "forward", (InputPlan("x", ("batch", 4), "float32"),), ())
    return ProgramPlan(
        name="p", model="m", backend=backend, factory="m:f", kwargs={}, weights=None, seed=0, sources=(),
        methods=(method,), data_name=None, options={}, atol=atol, rtol=rtol, min_cosine=min_cosine, check_enabled=True,
        model_entry={}, program_entry={}, check_set=check_set,
    )


INT8 = {"backend": "xnnpack", "atol": 0.5, "rtol": 0.1, "min_cosine": 0.97}


def figures(program: ProgramPlan, expected: torch.Tensor, actual: torch.Tensor, **kwargs):
    return checked_figures(program, "forward", {"batch": 2}, [expected], [actual], **kwargs)


# -- the rules, on tensors made here -------------------------------------------------------------


def test_a_half_precision_rounding_passes_by_its_dtype():
    torch.manual_seed(0)
    e = torch.randn(8, 32).to(torch.bfloat16)
    a = (e.double() + 0.03 * torch.randn(8, 32) * e.double().abs().mean()).to(torch.bfloat16)  # a few bf16 ulps
    (f,) = figures(plan(), e, a)
    assert f.verdict is Verdict.PASSED and f.dtype == "bfloat16" and (f.rtol, f.min_cosine) == (0.25, 0.999)
    with pytest.raises(CheckError, match="bfloat16: exact") as info:  # the manifest can still ask for exact
        figures(plan(atol=0, rtol=0, check_set=("atol", "rtol")), e, a)
    assert "loosen programs.p.check (atol, rtol, min_cosine)" in str(info.value)


def test_rtol_lets_large_scores_pass_as_small_ones_do():
    """A resnet50-like int8 classifier: scores up to ~200, errors ~1.5% of their magnitude (3.7 on
    scores up to 249 measured), against its resnet18-like sibling whose scores stay near 1."""
    torch.manual_seed(0)
    e = 50 * torch.randn(1, 100)
    a = e + 0.015 * e.abs().mean() * torch.randn(1, 100)
    assert float((a - e).abs().max()) > 0.5  # beyond the flat atol alone
    (f,) = figures(plan(**INT8), e, a)
    assert f.verdict is Verdict.PASSED and f.worst_excess < 1
    with pytest.raises(CheckError, match="differs from eager PyTorch"):
        figures(plan(**{**INT8, "rtol": 0.0}), e, a)


def test_a_near_miss_says_how_to_loosen_and_a_wrong_program_says_it_is_not_a_tolerance_problem():
    torch.manual_seed(0)
    e = torch.randn(4, 16)
    with pytest.raises(CheckError) as near:
        figures(plan(), e, e + 3e-4)
    assert not isinstance(near.value, WrongProgram)
    assert "loosen programs.p.check" in str(near.value) and "float32: |a - e| <= atol 0.0001" in str(near.value)
    for wrong in (torch.randn(4, 16), 2 * e, torch.zeros(4, 16), e.masked_fill(e > 1, float("nan"))):
        with pytest.raises(WrongProgram) as info:
            figures(plan(), e, wrong, inputs=(e,))
        message = str(info.value)
        assert "computes something else" in message and "not a tolerance problem" in message, message
        assert "loosen programs" not in message
        assert info.value.method == "forward" and info.value.inputs[0] is e
    with pytest.raises(WrongProgram, match="the program's output is all zeros, eager PyTorch's is not"):
        figures(plan(), e, torch.zeros(4, 16))


def test_degenerate_references_prove_nothing_and_say_why():
    zeros = torch.zeros(2, 10)
    (f,) = figures(plan(), zeros, zeros)
    assert f.verdict is Verdict.PROVES_NOTHING and "all zeros" in f.reason
    (f,) = figures(plan(), torch.full((2, 10), 3.0), torch.full((2, 10), 3.0))
    assert f.verdict is Verdict.PROVES_NOTHING and "constant 3" in f.reason
    # torchvision's mobilenet_v2 with random weights, static int8: eager near 1e-9, rounded to zeros.
    tiny = 1e-9 * torch.randn(1, 100)
    (f,) = figures(plan(**INT8), tiny, torch.zeros(1, 100))
    assert f.verdict is Verdict.PROVES_NOTHING
    assert "far below the tolerance" in f.reason and "the program's output is all zeros" in f.reason
    # An output the element-wise bound cannot judge, but the cosine can: passed, and said so.
    small = 0.1 * torch.randn(1, 50)
    (f,) = figures(plan(**INT8), small, small * 1.01)
    assert f.verdict is Verdict.PASSED and "only the cosine similarity checks it" in f.reason
    with pytest.raises(WrongProgram):
        figures(plan(**INT8), small, -small)


def test_integer_and_bool_outputs_compare_exactly():
    labels = torch.tensor([1, 2, 3])
    (f,) = figures(plan(), labels, labels.clone())
    assert f.verdict is Verdict.PASSED and (f.atol, f.rtol) == (0.0, 0.0)
    with pytest.raises(CheckError, match="1 of 3 elements differ"):
        figures(plan(), labels, torch.tensor([1, 2, 4]))


def test_top1_agreement_on_samples_is_reported_on_all_rows_and_judged_on_clear_winners():
    e = torch.tensor([[5.0, 1.0, 0.0], [0.0, 5.0, 1.0], [1.0, 1.0, 0.0]])  # the last row is a tie
    a = e.clone()
    a[2] = torch.tensor([0.9, 1.1, 0.0])
    (f,) = checked_figures(plan(atol=0.5, rtol=0.0, min_cosine=0.9), "forward", {}, [e], [a], data="samples", samples=3)
    assert f.data == "samples" and f.samples == 3 and f.top1 == pytest.approx(2 / 3) and f.sizes == {}
    assert f.verdict is Verdict.PASSED  # the tie went the other way: a right program
    # A quantized program's wide tolerance leaves no row a clear winner: the figure is still given.
    (q,) = checked_figures(plan(atol=5.0, rtol=0.0, min_cosine=0.9), "forward", {}, [e], [a], data="samples", samples=3)
    assert q.top1 == pytest.approx(2 / 3) and q.verdict is Verdict.PASSED
    swapped = e[:, [1, 0, 2]]
    with pytest.raises(WrongProgram, match="computes something else"):
        checked_figures(plan(atol=10, rtol=0.0, min_cosine=-1), "forward", {}, [e], [swapped], data="samples", samples=3)


def test_measure_keeps_nonfinite_where_eager_has_them():
    e = torch.tensor([1.0, float("inf"), float("nan")])
    found = measure(e, e.clone(), Tolerance(1e-5, 0.0, 0.9))
    assert found.within and not found.nonfinite


def test_sizes_run_growing_shrinking_and_repeated():
    sizes = [{"batch": 2}, {"batch": 1}, {"batch": 8}]
    order = [s["batch"] for s in run_orders(sizes)]
    assert order == [1, 2, 2, 8, 8, 2, 1, 1]
    # Every step the longer order of before took (growing, shrinking, then each size twice), in 8
    # runs instead of 12 (the largest size twice instead of four times).
    before = [1, 2, 8, 8, 2, 1, 1, 1, 2, 2, 8, 8]
    assert set(itertools.pairwise(order)) == set(itertools.pairwise(before))
    assert [s["batch"] for s in run_orders([{"batch": 4}, {"batch": 1}])] == [1, 4, 4, 1, 1]
    assert run_orders([{}]) == [{}, {}]


# -- programs, lowered in this process -----------------------------------------------------------


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of checks.toml and its models; the manifest's path."""
    root = tmp_path_factory.mktemp("checks")
    shutil.copy(MANIFESTS / "checks.toml", root / "checks.toml")
    shutil.copytree(MANIFESTS / "checkmodels", root / "checkmodels", ignore=shutil.ignore_patterns("__pycache__"))
    return root / "checks.toml"


def lowered(manifest: Path, name: str, staging: Path, samples: bool = True):
    """(program, eager model, .pte, samples) of ``name``, lowered as a build lowers it."""
    from ptebuild.lowering.check import native_stderr_silenced
    from ptebuild.lowering.samples import load_program_samples
    from ptebuild.manifest.load import load_manifest
    from ptebuild.models.factory.loading import build_model
    from ptebuild.models.factory.lower import lower

    build_plan = load_manifest(manifest)
    program = next(p for p in build_plan.programs if p.name == name)
    model = build_model(program, manifest.parent, str(manifest))
    found = load_program_samples(program, manifest.parent, str(manifest)) if samples else {}
    inputs = {m.name: make_inputs(m, program.seed) for m in program.methods}
    with native_stderr_silenced():
        files = lower(model, program, inputs, staging, lambda _: None, samples=found)
    return program, model, files.files[program.pte_name], found


def test_a_program_whose_answers_depend_on_the_order_of_sizes_is_refused(project, tmp_path, monkeypatch):
    """The issue's static int8 XNNPACK policy with a dynamic batch, without the fix for XNNPACK's
    quantized mean: a check that runs the example size first (4, then 1: what the check did before)
    passes it; the check as it will run refuses it, with the sizes and the order."""
    from executorch.runtime import Runtime

    from ptebuild.backends.xnnpack import XnnpackBackend

    monkeypatch.setattr(XnnpackBackend, "workarounds", lambda self, options, program: {})
    program, model, pte, _ = lowered(project, "policy_int8", tmp_path / "unfixed")
    method = program.methods[0]
    def errors(order: tuple[int, ...]) -> list[float]:
        executable = Runtime.get().load_program(pte).load_method("forward")
        found = []
        for batch in order:
            inputs = make_inputs(method, program.seed, {"batch": batch})
            actual = flatten_outputs(list(executable.execute(flat_inputs(inputs))))[0]
            with torch.no_grad():
                found.append(float((actual - model(*inputs)).abs().max()))
        return found

    assert max(errors((4, 1))) < 0.05  # the old check's order: the example size (4), then the min
    grown = errors((1, 4))  # a device that grows its batch
    assert grown[0] < 0.05 < grown[1] < 0.5, grown  # wrong, yet within int8's atol 0.5
    with pytest.raises(OrderDependent) as info:
        check_program(model, program, pte, None)
    message = str(info.value)
    assert "answers depend on what ran before it on the loaded program: at {'batch': 4} after {'batch': 1}" in message
    assert "runs in this order: batch 1 -> batch 4." in message and "not a tolerance problem" in message


@pytest.mark.slow
def test_the_fix_for_xnnpacks_quantized_mean_makes_it_right_in_every_order(project, tmp_path):
    program, model, pte, _ = lowered(project, "policy_int8", tmp_path / "fixed")
    figures = check_program(model, program, pte, None)
    assert all(f.max_abs_error < 0.05 for f in figures) and {f.sizes["batch"] for f in figures} == {1, 4}


@pytest.mark.slow
def test_calibrating_on_samples_beats_calibrating_on_noise(project, tmp_path, monkeypatch):
    """An int8 classifier of readings near 100: calibrated on generated N(0, 1) inputs, its top
    class agrees with eager PyTorch's on few of the samples; calibrated on the samples, on all."""
    monkeypatch.syspath_prepend(str(project.parent))
    from checkmodels import readings
    from executorch.runtime import Runtime

    agreement, accuracy = {}, {}
    for calibrated in ("noise", "samples"):
        program, model, pte, _ = lowered(project, "classifier_int8", tmp_path / calibrated, samples=calibrated == "samples")
        executable = Runtime.get().load_program(pte).load_method("forward")
        x, labels = readings(64, seed=99)
        with torch.no_grad():
            eager = model(x).argmax(-1)
        found = torch.cat([executable.execute([batch])[0].argmax(-1) for batch in x.split(8)])
        agreement[calibrated] = float((found == eager).double().mean())
        accuracy[calibrated] = float((found == labels).double().mean())
        if calibrated == "noise":  # what the check on samples says of it: wrong, not a near miss
            found = {"forward": [(b,) for b in x.split(8)]}
            with pytest.raises(WrongProgram, match="the program computes something else"):
                check_program(model, program, pte, None, samples=found)
    assert agreement["noise"] < 0.5 and agreement["samples"] > 0.95, (agreement, accuracy)
    assert accuracy["samples"] > accuracy["noise"] + 0.4, accuracy


# -- through the command line, once: the report, the record, the log --------------------------------


def build_checks(root: Path, *only: str) -> tuple[Path, int, dict[str, dict], str]:
    """Build ``only`` of checks.toml (a copy in ``root``) with --keep-going: (folder, exit, report by program, stderr)."""
    from helpers import ptebuild

    shutil.copy(MANIFESTS / "checks.toml", root / "checks.toml")
    shutil.copytree(MANIFESTS / "checkmodels", root / "checkmodels", ignore=shutil.ignore_patterns("__pycache__"))
    done = ptebuild("build", root / "checks.toml", "--cache", root / "cache", "--keep-going", "--json", "--only", *only)
    try:
        report = json.loads(done.stdout)
    except ValueError:
        raise AssertionError(f"no JSON (exit {done.returncode}):\n{done.stdout}\n{done.stderr}") from None
    return root, done.returncode, {p["name"]: p for p in report["targets"]}, done.stderr


@pytest.fixture(scope="session")
def build(tmp_path_factory):
    """A bfloat16 and a float16 MLP (XNNPACK and portable), the wrong float16 layer norm and the zero
    head: one build. The other two half-precision programs: :func:`test_every_half_precision_program_builds`."""
    return build_checks(tmp_path_factory.mktemp("checks-cli"), "bf16_xnnpack", "fp16_portable", "layer_norm_portable",
                        "zero_head_portable")


def assert_half_precision_built(root: Path, programs: dict[str, dict], expected: dict[str, str]) -> None:
    record = json.loads((root / "out" / "ptebuild.json").read_text())["targets"]
    for name, dtype in expected.items():
        program = programs[name]
        assert program["status"] == "built", program.get("message")
        assert {f["dtype"] for f in program["figures"]} == {dtype}
        checked = program["checked"]
        assert checked["verdict"] == "passed" and list(checked["tolerances"]) == [dtype]
        assert checked["data"] == {"random": [{"batch": 2}, {"batch": 1}, {"batch": 8}], "samples": 0}
        assert record[name]["checked"]["tolerances"] == checked["tolerances"]


def test_half_precision_programs_build_with_the_defaults(build):
    root, _, programs, _ = build
    assert_half_precision_built(root, programs, {"bf16_xnnpack": "bfloat16", "fp16_portable": "float16"})


@pytest.mark.slow
def test_every_half_precision_program_builds(tmp_path):
    """bfloat16 and float16 on portable and XNNPACK (the two the session's build leaves out)."""
    root, code, programs, _ = build_checks(tmp_path, "bf16_portable", "fp16_xnnpack")
    assert code == 0
    assert_half_precision_built(root, programs, {"bf16_portable": "bfloat16", "fp16_xnnpack": "float16"})


def test_a_wrong_program_is_named_and_where_it_diverges_is_found(build):
    root, code, programs, _ = build
    assert code == 1
    error = programs["layer_norm_portable"]["message"]
    assert "the program computes something else than eager PyTorch" in error and "not a tolerance problem" in error
    assert "loosen programs" not in error
    assert "it first diverges at aten.layer_norm.default (node layer_norm" in error, error
    log = (root / "out" / ".ptebuild" / "logs" / "layer_norm_portable.log").read_text()
    rows = [line for line in log.splitlines() if "aten." in line and ("ok" in line or "WRONG" in line)]
    assert "aten.linear.default" in rows[0] and rows[0].rstrip().endswith("ok")
    assert "aten.layer_norm.default" in rows[1] and rows[1].rstrip().endswith("WRONG")


def test_a_check_that_proves_nothing_says_so(build):
    from ptebuild.cli.build import summary

    root, _, programs, stderr = build
    program = programs["zero_head_portable"]
    assert program["status"] == "built" and program["checked"]["verdict"] == "proves-nothing"
    assert "all zeros" in program["checked"]["reasons"][0]
    assert "note: zero_head_portable: its check proves nothing: method 'forward' output 0: eager PyTorch's output is all zeros" in stderr
    assert "give the model its real weights" in stderr
    row = next(line for line in summary({"targets": [program], "seconds": 1.0, "out_dir": "out"}).splitlines()
               if line.startswith("zero_head_portable"))
    assert "PROVES NOTHING: err 0.0e+00 cos 1.000000 (float32 atol 0.0001 rtol 1e-05; 1 size)" in row
    record = json.loads((root / "out" / "ptebuild.json").read_text())["targets"]["zero_head_portable"]
    assert record["checked"]["verdict"] == "proves-nothing"


@pytest.mark.slow
def test_samples_are_checked_reported_and_bundled(tmp_path):
    """The int8 classifier, calibrated and checked on its factory's samples: figures on the samples
    with the top-1 agreement, the samples in the .bpte, and its tolerance derived from the errors."""
    from ptebuild.runtime.bpte_file import read_bpte

    root, code, programs, _ = build_checks(tmp_path, "classifier_int8")
    program = programs["classifier_int8"]
    assert code == 0, program.get("message")
    on_samples = [f for f in program["figures"] if f["data"] == "samples"]
    assert len(on_samples) == 1 and on_samples[0]["samples"] == 8 and on_samples[0]["top1"] == 1.0
    assert program["checked"]["data"]["samples"] == 8
    assert len(read_bpte(root / "out" / "classifier_int8.bpte").suite("forward").cases) == 3 + 8
    bundled = json.loads((root / "out" / "ptebuild.json").read_text())["targets"]["classifier_int8"]["bundled_io"]
    assert bundled["atol"] == pytest.approx(2 * program["checked"]["max_abs_error"] + 1e-5)


@pytest.mark.slow
def test_torchvision_like_classifiers_with_random_weights(tmp_path):
    """Static int8: the resnet50-like net (scores in the hundreds) passes thanks to rtol as its
    resnet18-like sibling does; the mobilenet_v2-like net's scores near 1e-9, rounded to zeros by
    int8, prove nothing (not "wrong", no advice to loosen), and its float program proves nothing either."""
    _, code, programs, stderr = build_checks(tmp_path, "resnet50_int8", "resnet18_int8", "mobilenet_v2_int8",
                                             "mobilenet_v2_xnnpack")
    assert code == 0, {name: p.get("message") for name, p in programs.items()}
    for name in ("resnet50_int8", "resnet18_int8"):
        assert programs[name]["checked"]["verdict"] == "passed", name
    resnet50 = programs["resnet50_int8"]["figures"][0]
    assert resnet50["max_abs_error"] > 0.5 and resnet50["magnitude"] > 10  # beyond atol alone, within rtol
    for name in ("mobilenet_v2_int8", "mobilenet_v2_xnnpack"):
        checked = programs[name]["checked"]
        assert checked["verdict"] == "proves-nothing" and "far below the tolerance" in checked["reasons"][0], name
    assert "the program's output is all zeros" in programs["mobilenet_v2_int8"]["checked"]["reasons"][0]
    assert "loosen" not in stderr
