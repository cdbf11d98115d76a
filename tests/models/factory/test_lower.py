"""The method wrapper gives each output slot its own tensor before lowering (CUDA's runtime in
ExecuTorch 1.5 frees a shared one twice); the fix is generic, so it is tested here with the
portable backend and ExecuTorch's runtime, against eager PyTorch."""

from __future__ import annotations

import torch
from recurrent_models import KeywordSpotter

from ptebuild.lowering.check import flatten_outputs
from ptebuild.models.factory.lower import MethodModule, separate_outputs, shared_output_slots
from ptebuild.runtime.pte_file import open_pte


class Aliased(torch.nn.Module):
    """One tensor in slots 0, 2 and 3 (``y``, ``y``, ``y.detach()``), a strided one in slot 4."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.linear(x)
        return y, torch.relu(x), y, y.detach(), y.t()


def _lower(module, inputs, path):
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    exported = torch.export.export(module, inputs, strict=False)
    program = to_edge_transform_and_lower({"forward": exported}, compile_config=EdgeCompileConfig(_check_ir_validity=False))
    path.write_bytes(program.to_executorch().buffer)
    return exported


def _slots(pte) -> list[int]:
    with open_pte(pte) as reader:
        (plan,) = reader.execution_plans()
        return plan.outputs()


def test_shared_slots_are_found_in_the_exported_graph():
    model = Aliased().eval()
    exported = torch.export.export(MethodModule.wrap(model, "forward"), (torch.randn(2, 4),), strict=False)
    assert shared_output_slots(exported) == [(0, 2)]  # y.detach() is an alias node: the wrapper sees it
    fixed = torch.export.export(MethodModule.wrap(model, "forward", distinct=True), (torch.randn(2, 4),), strict=False)
    assert shared_output_slots(fixed) == []


def test_each_slot_gets_its_own_tensor_and_matches_eager(tmp_path):
    from executorch.runtime import Runtime

    torch.manual_seed(0)
    model = Aliased().eval()
    x = torch.randn(2, 4)
    plain, fixed = tmp_path / "plain.pte", tmp_path / "fixed.pte"
    _lower(MethodModule.wrap(model, "forward"), (x,), plain)
    _lower(MethodModule.wrap(model, "forward", distinct=True, contiguous=True), (x,), fixed)
    shared = _slots(plain)
    assert len(shared) == 5 and len(set(shared)) < 5  # the program ExecuTorch emits shares a value
    assert len(set(_slots(fixed))) == 5
    expected = flatten_outputs(model(x))
    actual = flatten_outputs(list(Runtime.get().load_program(fixed).load_method("forward").execute([x])))
    assert len(actual) == len(expected) == 5
    for e, a in zip(expected, actual):
        assert torch.allclose(e, a, atol=1e-6)


def test_separate_outputs_keeps_distinct_and_contiguous_ones_as_they_are():
    a, b = torch.randn(2, 3), torch.randn(3, 2)
    out = separate_outputs({"a": a, "pair": (b, a.t())}, distinct=True, contiguous=True)
    assert out["a"] is a and out["pair"][0] is b
    assert out["pair"][1].is_contiguous() and torch.equal(out["pair"][1], a.t())


def test_a_kv_cache_written_in_place_lowers_without_requires_grad_false(tmp_path):
    """Export and lowering run under ``torch.no_grad()``: a static KV cache in buffers, written
    with ``index_copy_`` from the parameters' outputs, lowers from a factory that does not call
    ``requires_grad_(False)`` (before: "a leaf Variable that requires grad is being used in an
    in-place operation" while emitting), and the program matches eager PyTorch."""
    from pathlib import Path

    from ptebuild.lowering.check import check_program
    from ptebuild.lowering.examples import make_inputs
    from ptebuild.manifest import load_manifest
    from ptebuild.models.factory.loading import build_model
    from ptebuild.models.factory.lower import lower

    manifests = Path(__file__).resolve().parents[2] / "manifests"
    plan = load_manifest(manifests / "decoders.toml")
    program = next(p for p in plan.programs if p.name == "kv_portable")
    model = build_model(program, manifests, plan.manifest)
    assert torch.is_grad_enabled() and any(p.requires_grad for p in model.parameters())
    lowered = lower(model, program, {m.name: make_inputs(m, program.seed) for m in program.methods}, tmp_path, lambda _: None)
    assert torch.is_grad_enabled()  # as it was
    figures = check_program(model, program, lowered.files[program.pte_name], None)
    assert figures and all(f.max_abs_error < 1e-5 for f in figures)


def test_a_lowering_that_may_take_minutes_says_why():
    """A 101-step GRU lowered on XNNPACK for 6-7 minutes with 50 'still lowering' lines and no word
    of why: the lowering's line names the layer that becomes every step's operators."""
    from ptebuild.models.factory.lower import _why_long

    assert _why_long(KeywordSpotter()) == (" (the GRU 'gru' becomes the operators of all its steps of the sequence: a lowering "
                                     "that grows with its length and can take minutes)")
    assert _why_long(torch.nn.Linear(4, 4)) == ""
