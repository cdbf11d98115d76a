"""Where a wrong program first diverges from eager PyTorch: the first operator, or delegated
partition, whose output differs.

When the check finds a program that computes something else (:class:`~ptebuild.lowering.check.
WrongProgram`), the worker lowers the failing method again as the build did (same export,
same quantization, same partitioner) with every operator's output surfaced as an extra output of
the program, by ExecuTorch's own numerical debugger (``executorch.devtools.intermediate_output_tap``:
a ``tap`` node after each operator survives partitioning, so an operator inside a delegated
partition surfaces as an output of that partition), runs it in ExecuTorch's runtime on the
failing inputs, and compares each operator's output with the same graph run by PyTorch on the same
inputs, in graph order. The first operator far from PyTorch's (the check's own ``wrong`` rule:
cosine under 0.9, or an error as large as the value) is where the program first diverges; the
first beyond its tolerance is named too. Before that, the exported graph itself is run by PyTorch
against the eager model: a graph that already differs was captured wrong by ``torch.export`` (or
the backend's quantization), and ExecuTorch is not at fault.

ExecuTorch 1.5.1's other route to intermediate outputs, an ETDump with a debug buffer for the
devtools Inspector, cannot be read back from the pip runtime here (the dump it writes with a debug
buffer fails to decode: ``flatc``: "string contains non-utf8 bytes").

The figures of every operator go to the program's log (an exception note). Finding the place is a
best effort: the wrong program is named wrong whether or not it is found.

Runs in a worker.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ptebuild.lowering.binding import bind, call_method
from ptebuild.lowering.check import WrongProgram, dtype_name, flatten_outputs, judge, measure
from ptebuild.lowering.divergence import Divergence, located, operator_divergence
from ptebuild.plan import MethodPlan, ProgramPlan


def locate(wrong: WrongProgram, model: Any, program: ProgramPlan, inputs_by_method: Mapping[str, tuple[Any, ...]],
           samples: Mapping[str, list[tuple[Any, ...]]], progress: Callable[[str], None]) -> WrongProgram:
    """``wrong`` with where the program first diverges added to its line, and every operator's
    figures in a note (the program's log)."""
    from ptebuild.backends import bound_backend
    from ptebuild.causes import describe

    method = next((m for m in program.methods if m.name == wrong.method), None)
    if method is None or not wrong.inputs:
        return wrong
    kind = bound_backend(program).backend.check_kind(program.options)
    if not kind.in_executorch:
        return WrongProgram(
            f"{wrong.message}; where it first diverges is searched in ExecuTorch's runtime, which does not run "
            f"{program.backend} programs here (the check ran it with {kind.name})",
            location=wrong.location or f"programs.{program.name}", method=wrong.method, inputs=wrong.inputs, output=wrong.output)
    progress(f"looking for where {method.name} first diverges from eager PyTorch")
    try:
        found = first_divergence(model, program, method, inputs_by_method[method.name], wrong.inputs,
                                 samples.get(method.name), wrong.output)
    except Exception as exc:  # a best effort: the program is named wrong either way
        found = Divergence(f"where it first diverges could not be found ({describe(exc).line})")
        note = describe(exc).text
    else:
        note = found.table() if found.rows else ""
    return located(wrong, found, note, program.name)


def first_divergence(model: Any, program: ProgramPlan, method: MethodPlan, example: tuple[Any, ...],
                     inputs: tuple[Any, ...], samples: list[tuple[Any, ...]] | None, output: int = 0) -> Divergence:
    """Lower ``method`` again with every operator's output surfaced, run it on ``inputs``, and
    compare operator by operator (see the module's text)."""
    import torch

    from ptebuild import backends
    from ptebuild.lowering.check import native_stderr_silenced
    from ptebuild.models.factory.lower import MethodModule, dynamic_shapes, export_method

    bound = backends.bound_backend(program)
    backend, options = bound.backend, bound.options
    settings = program.check_settings()
    reference = backend.reference_model(model, program)
    transformed = backend.transform_model(model, options, program)
    inline = dataclasses.replace(program, data_name=None)  # weights inside: nothing to place
    with native_stderr_silenced():
        with torch.no_grad():
            eager = flatten_outputs(call_method(reference, method, inputs, program.model))
        # 1. The exported graph, run by PyTorch, against the eager model: did export capture it?
        shapes = dynamic_shapes(method)
        binding = bind(getattr(transformed, method.function), method, program.model)
        wrapped = MethodModule.wrap(transformed, method.function, bool(backend.distinct_outputs), bool(backend.contiguous_outputs),
                                    binding)
        raw = torch.export.export(wrapped, example, dynamic_shapes=None if shapes is None else (shapes,), strict=False)
        far = _far(eager, raw.module(), inputs, output, settings)
        if far is not None:
            return Divergence(
                f"the exported graph, run by PyTorch, is already far from the eager model (cosine {far:.4f}): "
                "torch.export captured something else, and ExecuTorch's runtime is not at fault: look for Python state, "
                "data-dependent branches or torch.compiler.is_exporting() in the model")
        # 2. The graph the backend lowers (quantized, for a quantizing backend), run by PyTorch.
        exported = export_method(transformed, inline, method, example, lambda _: None, samples)
        far = _far(eager, exported.module(), inputs, output, settings)
        if far is not None:
            fix = ("calibrate it on real inputs (models.M.methods.F.samples) or use a dynamic scheme"
                   if program.calibrated else "use another quantization scheme")
            return Divergence(
                f"the graph {program.backend} lowers, quantized and run by PyTorch, is already far from the eager model "
                f"(cosine {far:.4f}): the quantization itself computes something else on these inputs, not ExecuTorch's "
                f"runtime; {fix}")
        # 3. Every operator surfaced, lowered as the build lowers, run by ExecuTorch.
    return operator_divergence(exported, inputs, backend, options, inline, settings)


def _far(eager: list[Any], graph: Any, inputs: tuple[Any, ...], output: int, settings: Any) -> float | None:
    """The cosine of ``graph``'s output ``output`` with eager's when it is far from it (the check's
    wrong rule), else None."""
    import torch

    with torch.no_grad():
        found = flatten_outputs(graph(*inputs))
    if output >= len(eager) or output >= len(found):
        return None
    compared = measure(eager[output], found[output], settings.for_dtype(dtype_name(eager[output])))
    return compared.cosine if judge(compared)[2] else None
