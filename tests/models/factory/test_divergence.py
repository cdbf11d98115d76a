"""Where a wrong program first diverges (:mod:`ptebuild.models.factory.divergence`): the first
operator whose output in ExecuTorch's runtime is far from PyTorch's run of the same graph, named on
the error's line with every operator's figures in its note; a graph that ``torch.export`` already
captured wrong blamed on the export, not on ExecuTorch; a program right operator by operator said
to be so; and a search that cannot run (another runtime, a failure of its own) saying why, the
program named wrong all the same.

The programs are ``tests/manifests/checks.toml``'s, lowered and run in this process: the float16
layer norm that ExecuTorch 1.5.1's CPU kernel computes wrong (found by the real check first), the
float16 MLP it computes right; small models made here where the search must stop early. The
report and the log through the command line: ``tests/lowering/test_check.py``.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest
import torch

from ptebuild.lowering.check import WrongProgram, check_program, native_stderr_silenced
from ptebuild.lowering.examples import make_inputs
from ptebuild.manifest.load import load_manifest
from ptebuild.models.factory.divergence import Divergence, first_divergence, locate
from ptebuild.models.factory.loading import build_model
from ptebuild.models.factory.lower import lower
from ptebuild.plan import BuildPlan, ProgramPlan

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
SEARCHING = "looking for where forward first diverges from eager PyTorch"


@pytest.fixture(scope="module")
def checks(tmp_path_factory) -> tuple[Path, BuildPlan]:
    """A copy of checks.toml and its models: (manifest, plan)."""
    root = tmp_path_factory.mktemp("checks")
    shutil.copy(MANIFESTS / "checks.toml", root / "checks.toml")
    shutil.copytree(MANIFESTS / "checkmodels", root / "checkmodels", ignore=shutil.ignore_patterns("__pycache__"))
    return root / "checks.toml", load_manifest(root / "checks.toml")


def program_of(checks, name: str) -> tuple[ProgramPlan, torch.nn.Module, dict[str, tuple]]:
    """(program, its model, its generated inputs by method)."""
    manifest, plan = checks
    program = next(p for p in plan.programs if p.name == name)
    model = build_model(program, manifest.parent, str(manifest))
    return program, model, {m.name: make_inputs(m, program.seed) for m in program.methods}


def wrong_of(program: ProgramPlan, inputs: tuple) -> WrongProgram:
    """A wrong program's error as the check raises it, for ``inputs`` of method ``forward``."""
    return WrongProgram("method 'forward' at {} output 0: the program computes something else than eager PyTorch",
                        location=f"programs.{program.name}", method="forward", inputs=inputs)


def test_a_wrong_program_is_located_at_its_first_wrong_operator(checks, tmp_path):
    program, model, inputs = program_of(checks, "layer_norm_portable")
    with native_stderr_silenced():
        files = lower(model, program, inputs, tmp_path, lambda _: None)
    with pytest.raises(WrongProgram) as info:
        check_program(model, program, files.files[program.pte_name], None)
    wrong = info.value
    progress: list[str] = []
    located = locate(wrong, model, program, inputs, {}, progress.append)
    assert progress == [SEARCHING]
    assert (located.location, located.method, located.output) == (wrong.location, wrong.method, wrong.output)
    assert located.inputs is wrong.inputs
    said = located.message.removeprefix(f"{wrong.message}; ")
    assert said != located.message, located.message
    assert re.fullmatch(
        r"it first diverges at aten\.layer_norm\.default \(node layer_norm in module model\.1\): cosine 0\.9\d+, max abs "
        r"error [\d.e+]+ against the same graph run by PyTorch on the same inputs, the operators before it agree; "
        r"per-operator figures in the log", said), said
    [note] = located.__notes__
    lines = note.splitlines()
    assert lines[0] == ("Each operator's output in ExecuTorch's runtime against the same graph run by PyTorch, on the failing "
                        "inputs, in graph order:")
    assert lines[1].split() == ["#", "operator", "node", "dtype", "max", "abs", "err", "cosine", "partition", "verdict"]
    assert [line.split()[:4] for line in lines[2:]] == [["0", "aten.linear.default", "linear", "float16"],
                                                       ["1", "aten.layer_norm.default", "layer_norm", "float16"]]
    assert [line.split()[-2:] for line in lines[2:]] == [["-", "ok"], ["-", "WRONG"]]  # kernels of their own


def test_a_program_right_operator_by_operator_is_said_to_differ_in_how_it_is_planned(checks):
    program, model, inputs = program_of(checks, "fp16_portable")
    method = program.methods[0]
    example = inputs["forward"]
    found = first_divergence(model, program, method, example, example, None)
    assert found.sentence == (
        "with every operator's output surfaced the program computes what PyTorch does: the difference comes from how "
        "ExecuTorch plans or fuses the program, not from one operator; per-operator figures in the log")
    assert [(r.index, r.target, r.node, r.dtype) for r in found.rows] == [
        (0, "aten.linear.default", "linear", "float16"), (1, "aten.gelu.default", "gelu", "float16"),
        (2, "aten.linear.default", "linear_1", "float16")]
    assert all(r.within and not r.wrong and r.cosine > 0.999 and r.partition == "" for r in found.rows)
    assert found.rows[1].where() == "aten.gelu.default (node gelu in module model.1)"


def test_an_operator_inside_a_delegated_partition_is_named_with_it(tmp_path):
    """The tiny model's ``score`` on XNNPACK: its linears, add and relus in one delegated
    partition, the embedding and the mask's ``where`` kernels of their own."""
    from project_copy import copy_project

    manifest = copy_project(tmp_path / "project")
    program = next(p for p in load_manifest(manifest).programs if p.name == "tiny_xnnpack")
    model = build_model(program, manifest.parent, str(manifest))
    method = next(m for m in program.methods if m.name == "score")
    example = make_inputs(method, program.seed)
    found = first_divergence(model, program, method, example, example, None)
    assert {r.target: r.partition for r in found.rows} == {
        "aten.linear.default": "lowered_module_0", "aten.relu.default": "lowered_module_0", "aten.add.Tensor": "lowered_module_0",
        "aten.embedding.default": "", "aten.unsqueeze.default": "", "aten.zeros_like.default": "", "aten.where.self": ""}
    assert found.rows[0].where() == "aten.linear.default (node linear in module model.encoder.0, inside delegated partition lowered_module_0)"
    assert found.rows[0].row().split()[-2:] == ["lowered_module_0", "ok"]


class ExportsOtherwise(torch.nn.Module):
    """Answers the opposite while ``torch.export`` traces it: its graph is not the eager model."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        return -y if torch.compiler.is_exporting() else y


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def small(checks) -> tuple[ProgramPlan, tuple]:
    """A float32 portable program of one input ``x`` of shape [2, 16] (the zero head's), and its inputs."""
    program, _, inputs = program_of(checks, "zero_head_portable")
    return program, inputs["forward"]


def test_a_graph_the_export_captured_wrong_is_blamed_on_the_export(checks):
    program, example = small(checks)
    found = first_divergence(ExportsOtherwise().eval(), program, program.methods[0], example, example, None)
    assert found == Divergence(
        "the exported graph, run by PyTorch, is already far from the eager model (cosine -1.0000): torch.export captured "
        "something else, and ExecuTorch's runtime is not at fault: look for Python state, data-dependent branches or "
        "torch.compiler.is_exporting() in the model")


# Upstream's tap warns of a graph it finds nothing to tap in, even with error_on_empty=False.
@pytest.mark.filterwarnings("ignore:tap_intermediate_outputs_. no rule matched any node:UserWarning")
def test_a_program_without_an_operator_has_nothing_to_compare(checks):
    program, example = small(checks)
    found = first_divergence(Identity().eval(), program, program.methods[0], example, example, None)
    assert found == Divergence("the program has no operator to compare")


def test_a_search_that_fails_says_why_and_keeps_the_program_named_wrong(checks):
    program, example = small(checks)
    wrong = wrong_of(program, example)
    progress: list[str] = []
    located = locate(wrong, ExportsOtherwise().eval(), program, {"forward": (torch.randn(2, 5),)}, {}, progress.append)
    assert progress == [SEARCHING]
    said = located.message.removeprefix(f"{wrong.message}; ")
    assert re.fullmatch(r"where it first diverges could not be found \(RuntimeError: .*\[2, 5\].*\)", said), said
    assert located.location == wrong.location and located.inputs is example
    [note] = located.__notes__  # the search's own traceback, for the log
    assert note.startswith("Traceback (most recent call last):") and "in first_divergence" in note


def test_a_program_another_runtime_checks_is_not_searched(checks):
    program, example = small(checks)
    cuda = dataclasses.replace(program, backend="cuda")
    progress: list[str] = []
    located = locate(wrong_of(program, example), ExportsOtherwise().eval(), cuda, {"forward": example}, {}, progress.append)
    assert progress == []
    assert located.message.endswith(
        "; where it first diverges is searched in ExecuTorch's runtime, which does not run cuda programs here (the check "
        "ran it with aoti-runner-cuda)")
    assert not getattr(located, "__notes__", None)


@pytest.mark.parametrize("change", [{"method": "no_such_method"}, {"inputs": ()}], ids=["other-method", "no-inputs"])
def test_a_wrong_program_that_names_no_method_or_inputs_is_left_as_it_is(checks, change):
    program, example = small(checks)
    wrong = wrong_of(program, example)
    wrong = WrongProgram(wrong.message, location=wrong.location, **{"method": wrong.method, "inputs": wrong.inputs, **change})
    assert locate(wrong, Identity(), program, {"forward": example}, {}, lambda _: None) is wrong
