"""Where a lowered program first diverges from PyTorch: every operator's output surfaced, lowered as
the build lowers, run in ExecuTorch's runtime and compared with the same graph run by PyTorch.

:func:`operator_divergence` takes an exported program (one method, as a model kind exported it for
the build: after its backend's transform or quantization) and the failing inputs. Every operator's
output is surfaced as an extra output of the program by ExecuTorch's own numerical debugger
(``executorch.devtools.intermediate_output_tap``: a ``tap`` node after each operator survives
partitioning, so an operator inside a delegated partition surfaces as an output of that
partition); the program is lowered with the backend's partitioners, run in ExecuTorch's runtime on
the inputs, and each operator's output compared with the tapped graph run by PyTorch, in graph
order. The first operator far from PyTorch's (the check's own ``wrong`` rule: cosine under 0.9, or
an error as large as the value) is where the program first diverges; the first beyond its
tolerance is named too. Every kind that names a program wrong uses it: the factory kind
(:mod:`ptebuild.models.factory.divergence`, after asking whether the export itself was at fault)
and the multimodal kind (:mod:`ptebuild.models.multimodal.check`).

ExecuTorch 1.5.1's other route to intermediate outputs, an ETDump with a debug buffer for the
devtools Inspector, cannot be read back from the pip runtime here (the dump it writes with a debug
buffer fails to decode: ``flatc``: "string contains non-utf8 bytes").

Runs in a worker (imports torch and executorch when called).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptebuild.lowering.check import WrongProgram, dtype_name, judge, measure

MAX_TAPS = 4000
"""Operators surfaced at most (a model larger than this is searched in its first operators)."""


@dataclass(frozen=True)
class OperatorFigures:
    """One operator's output in ExecuTorch's runtime against PyTorch's run of the same graph."""

    index: int
    node: str
    target: str
    module: str
    partition: str
    """The delegated partition it ran in (``lowered_module_0``), or ``""`` (a kernel of its own)."""
    dtype: str
    max_abs_error: float
    cosine: float
    within: bool
    wrong: bool

    def where(self) -> str:
        module = f" in module {self.module}" if self.module else ""
        partition = f", inside delegated partition {self.partition}" if self.partition else ""
        return f"{self.target} (node {self.node}{module}{partition})"

    def row(self) -> str:
        verdict = "WRONG" if self.wrong else ("ok" if self.within else "beyond tolerance")
        return (f"{self.index:5d}  {self.target:40s} {self.node:28s} {self.dtype:9s} {self.max_abs_error:11.3g} "
                f"{self.cosine:10.6f}  {self.partition or '-':18s} {verdict}")


@dataclass(frozen=True)
class Divergence:
    """What the search found: a sentence for the error's line, and the figures for the log."""

    sentence: str
    rows: tuple[OperatorFigures, ...] = ()

    def table(self) -> str:
        head = f"{'#':>5s}  {'operator':40s} {'node':28s} {'dtype':9s} {'max abs err':>11s} {'cosine':>10s}  {'partition':18s} verdict"
        return "\n".join([
            "Each operator's output in ExecuTorch's runtime against the same graph run by PyTorch, on the failing "
            "inputs, in graph order:", head, *(r.row() for r in self.rows)])


def operator_divergence(exported: Any, inputs: tuple[Any, ...], backend: Any, options: Any, program: Any,
                        settings: Any) -> Divergence:
    """Lower ``exported`` (weights inside) again with every operator's output surfaced, run it on
    ``inputs`` in ExecuTorch's runtime, and compare operator by operator (the module's text).
    ``program``: the program's plan, for the backend's partitioners; ``settings``: its check's
    tolerances."""
    import dataclasses

    import torch
    import torch.utils._pytree as pytree
    from executorch.devtools.intermediate_output_tap import (
        FULL_TENSOR,
        select_all_call_function,
        strip_taps_,
        tap_intermediate_outputs_,
    )
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
    from executorch.runtime import Runtime

    from ptebuild.lowering.check import native_stderr_silenced
    from ptebuild.lowering.examples import flat_inputs

    inline = dataclasses.replace(program, data_name=None)  # weights inside: nothing to place
    with native_stderr_silenced():
        tapped, specs = tap_intermediate_outputs_(exported, rules=[(_tensor_outputs(select_all_call_function()), FULL_TENSOR)],
                                                  max_taps=MAX_TAPS, error_on_empty=False)
        if not specs:
            return Divergence("the program has no operator to compare")
        with torch.no_grad():
            aot, _ = pytree.tree_flatten(tapped.module()(*inputs))
        with backend.lowering_context(options):
            edge = to_edge_transform_and_lower(
                {"forward": tapped}, partitioner=backend.partitioners(options, inline),
                compile_config=EdgeCompileConfig(_check_ir_validity=False),
            )
            partitions = _partitions(edge.exported_program("forward"), specs)
            strip_taps_(edge)
            lowered = edge.to_executorch()
        with tempfile.TemporaryDirectory(prefix="ptebuild-divergence-") as folder:
            pte = Path(folder, "tapped.pte")
            with open(pte, "wb") as out:
                lowered.write_to_file(out)
            method_run = Runtime.get().load_program(pte).load_method("forward")
            runtime = list(method_run.execute(flat_inputs(inputs)))
    # A tap's output_index counts the graph's outputs, among them the buffers it mutates (a KV
    # cache), which neither PyTorch's module nor ExecuTorch's runtime returns.
    from torch.export.graph_signature import OutputKind

    mutations = sum(1 for out in tapped.graph_signature.output_specs if out.kind != OutputKind.USER_OUTPUT)
    rows = []
    for index, spec in enumerate(specs):
        a, r = aot[spec.output_index - mutations], runtime[spec.output_index - mutations]
        if not isinstance(a, torch.Tensor) or not isinstance(r, torch.Tensor) or a.shape != r.shape:
            continue
        found = measure(a, r, settings.for_dtype(dtype_name(a)))
        rows.append(OperatorFigures(index, spec.node_name, spec.op_target, spec.module_path or "",
                                    partitions.get(spec.node_name, ""), found.dtype, found.max_abs_error, found.cosine,
                                    found.within and found.cosine >= found.tolerance.min_cosine, judge(found)[2]))
    first_wrong = next((r for r in rows if r.wrong), None)
    first_off = next((r for r in rows if not r.within), None)
    if first_wrong is None:
        if first_off is not None:
            return Divergence(f"no single operator is far from PyTorch's on the same graph; the first beyond its tolerance "
                              f"is {first_off.where()} (cosine {first_off.cosine:.6f}); per-operator figures in the log", tuple(rows))
        return Divergence("with every operator's output surfaced the program computes what PyTorch does: the difference "
                          "comes from how ExecuTorch plans or fuses the program, not from one operator; per-operator "
                          "figures in the log", tuple(rows))
    before = "" if first_off is None or first_off.index >= first_wrong.index else (
        f" (the first beyond its tolerance, earlier: {first_off.where()}, cosine {first_off.cosine:.6f})")
    return Divergence(
        f"it first diverges at {first_wrong.where()}: cosine {first_wrong.cosine:.4f}, max abs error "
        f"{first_wrong.max_abs_error:.3g} against the same graph run by PyTorch on the same inputs, the operators before "
        f"it agree{before}; per-operator figures in the log", tuple(rows))


def located(wrong: WrongProgram, found: Divergence, note: str, program_name: str) -> WrongProgram:
    """``wrong`` with the search's sentence added to its line, and ``note`` (every operator's
    figures, or why the search failed) in an exception note: the program's log."""
    again = WrongProgram(f"{wrong.message}; {found.sentence}", location=wrong.location or f"programs.{program_name}",
                         method=wrong.method, inputs=wrong.inputs, output=wrong.output)
    if note:
        again.add_note(note)
    return again


def built_program_far(pte: Path, ptds: list[Path], method: str, inputs: tuple[Any, ...], expected: Any,
                      settings: Any) -> float | None:
    """The cosine of the built program's ``method`` (its first output) with ``expected`` on
    ``inputs``, when it is far from it (the check's wrong rule), else None: where every operator of
    the method lowered again agrees with PyTorch, a built program still far from the eager model
    is not this model lowered now (other weights, a build of other code)."""
    import torch
    from executorch.runtime import Runtime

    from ptebuild.runtime import one_data_file

    with one_data_file(pte, ptds) as ptd, torch.no_grad():
        loaded = Runtime.get().load_program(pte, data_path=ptd).load_method(method)
        actual = loaded.execute(list(inputs))[0]
    found = measure(expected, actual, settings.for_dtype(dtype_name(expected)))
    return found.cosine if judge(found)[2] else None


NOT_THIS_MODEL = ("lowered again from the eager model, every operator of {method} agrees with PyTorch, and the program as "
                  "built does not (cosine {cosine:.4f} on the same inputs): it is not this model lowered now (other weights, "
                  "or a build of other code); build it again from a clean cache")
"""The sentence where :func:`built_program_far` finds the built program far and the operators agree."""


def _tensor_outputs(selector: Any) -> Any:
    """``selector`` less the operators whose output is not one tensor (a symbolic size of a dynamic
    dim, a tuple of a mutating operator's results): a tap takes a tensor."""
    import torch

    def predicate(node: Any) -> bool:
        return isinstance(node.meta.get("val"), torch.Tensor) and bool(selector(node))

    return predicate


def _partitions(exported: Any, specs: list[Any]) -> dict[str, str]:
    """Tapped node name -> the delegated partition computing it, read from the lowered graph before
    the taps are stripped: the output slot of a spec holds its tap, whose source is then a
    ``getitem`` of a delegate call's outputs when the operator was delegated."""
    import operator

    outputs = list(exported.graph.output_node().args[0])
    found = {}
    for spec in specs:
        if spec.output_index >= len(outputs):
            continue
        tap = outputs[spec.output_index]
        source: Any = tap.args[0] if getattr(tap, "args", None) else None
        if source is not None and getattr(source, "target", None) is operator.getitem:
            call = source.args[0]
            if "call_delegate" in str(getattr(call, "target", "")):
                found[spec.node_name] = getattr(call.args[0], "name", "delegate")
    return found
