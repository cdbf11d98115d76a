"""Lower one program: torch.export -> to_edge_transform_and_lower -> to_executorch -> files.

Runs in a worker process: imports torch and executorch. The program's files are written into a
staging folder; publishing them into the output folder is the parent's job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptebuild.backends import get_backend
from ptebuild.causes import describe
from ptebuild.errors import BuildError
from ptebuild.insight.program import ProgramInsight
from ptebuild.insight.stages import Stage, StageClock
from ptebuild.plan import InputPlan, MethodPlan, ProgramPlan

Progress = Callable[[str], None]


@dataclass
class LoweredProgram:
    """The files of a lowered program, in a staging folder."""

    files: dict[str, Path]
    """Output file name (``policy.pte``, ``weights.ptd``) -> staged path."""
    methods: list[str]
    delegated: dict[str, int] = field(default_factory=dict)
    """Method -> number of delegate calls (0 for portable)."""
    insight: ProgramInsight | None = None
    """What the lowered graphs say (:func:`ptebuild.lowering.insight.lowered_insight`); None if
    they could not be counted (``problems`` says why)."""
    problems: list[str] = field(default_factory=list)
    """What went wrong beside the lowering itself (one line each), for the report's warnings."""


class MethodModule:
    """Factory of a module whose ``forward`` calls one method of the model."""

    @staticmethod
    def wrap(model: Any, function: str, distinct: bool = False, contiguous: bool = False) -> Any:
        """``distinct``: each output slot gets its own tensor (a tensor returned in several slots,
        or aliased by another slot, is cloned); ``contiguous``: a strided output is made
        contiguous. Both for runtimes that need it (:attr:`Backend.distinct_outputs`,
        :attr:`Backend.contiguous_outputs`); the eager check compares the outputs as always."""
        import torch

        class _Method(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, *args: Any) -> Any:
                out = getattr(self.model, function)(*args)
                if distinct or contiguous:
                    out = separate_outputs(out, distinct, contiguous)
                return out

        return _Method()


def _same_tensor(a: Any, b: Any) -> bool:
    """``a`` and ``b`` are one tensor's data seen twice (the same object, or views of one storage
    with the same shape, strides and offset: ``y.detach()`` twice). Works on export's fake tensors."""
    import torch

    if a is b:
        return True
    aliased = torch._C._is_alias_of(a, b)  # type: ignore[attr-defined]  # a private binding torch's stubs omit
    return aliased and tuple(a.shape) == tuple(b.shape) and a.stride() == b.stride() and a.storage_offset() == b.storage_offset()


def separate_outputs(out: Any, distinct: bool, contiguous: bool) -> Any:
    """``out`` with every tensor leaf its own (``distinct``) and contiguous (``contiguous``)."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    leaves, spec = tree_flatten(out)
    seen: list[Any] = []
    fixed = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            if contiguous and not leaf.is_contiguous():
                leaf = leaf.contiguous()
            if distinct and any(_same_tensor(leaf, other) for other in seen):
                leaf = leaf.clone()
            seen.append(leaf)
        fixed.append(leaf)
    return tree_unflatten(fixed, spec)


def shared_output_slots(exported: Any) -> list[tuple[int, ...]]:
    """Groups of output slots of an exported program that hold one graph value (``return y, y``)."""
    output = next(n for n in exported.graph.nodes if n.op == "output")
    slots: dict[object, list[int]] = {}
    for index, node in enumerate(output.args[0]):
        if node is not None and hasattr(node, "op"):
            slots.setdefault(node, []).append(index)
    return [tuple(s) for s in slots.values() if len(s) > 1]


def _dynamic_spec(spec: InputPlan, dims: dict[str, Any]) -> Any:
    """torch.export's dynamic shape of one input: a dict of axes for a tensor, the same structure
    for a tuple, list or dict, None for a scalar or a static tensor."""
    if spec.kind == "tensor":
        return {axis: dims[d] for axis, d in enumerate(spec.shape) if isinstance(d, str)} or None
    if spec.kind == "tuple":
        return tuple(_dynamic_spec(item, dims) for item in spec.items)
    if spec.kind == "list":
        return [_dynamic_spec(item, dims) for item in spec.items]
    if spec.kind == "dict":
        return {item.name: _dynamic_spec(item, dims) for item in spec.items}
    return None


def dynamic_shapes(method: MethodPlan) -> tuple[Any, ...] | None:
    """torch.export dynamic shapes for ``method``'s inputs, or None when every dim is static."""
    import torch

    if not method.dims:
        return None
    dims = {d.name: torch.export.Dim(d.name, min=d.min, max=d.max) for d in method.dims}
    return tuple(_dynamic_spec(spec, dims) for spec in method.inputs)


def export_method(model: Any, program: ProgramPlan, method: MethodPlan, example_inputs: tuple[Any, ...], progress: Progress) -> Any:
    import torch

    if not callable(getattr(model, method.function, None)):
        raise BuildError(
            f"model {program.model!r} has no callable {method.function!r} "
            f"for method {method.name!r}",
            location=f"programs.{program.name}",
        )
    shapes = dynamic_shapes(method)

    def export(module: Any) -> Any:
        """Export again a module that takes the inputs positionally (an unlifted graph)."""
        return torch.export.export(module, example_inputs, dynamic_shapes=shapes, strict=False)

    backend = get_backend(program.backend)
    options = backend.options_model.model_validate(program.options)
    progress(f"exporting {method.name}")
    try:
        # The method module's forward takes *args: its dynamic shapes are one entry, for ``args``.
        exported = torch.export.export(
            MethodModule.wrap(model, method.function, bool(backend.distinct_outputs), bool(backend.contiguous_outputs)),
            example_inputs,
            dynamic_shapes=None if shapes is None else (shapes,),
            strict=False,
        )
    except Exception as exc:
        raise BuildError(
            f"torch.export of method {method.name!r} failed: {summary_of(exc)}",
            location=f"programs.{program.name}",
        ) from exc
    shared = shared_output_slots(exported) if backend.distinct_outputs else []
    if shared:
        slots = ", ".join(" and ".join(map(str, group)) for group in shared)
        raise BuildError(
            f"method {method.name!r} returns one tensor in output slots {slots} ({backend.distinct_outputs}); "
            "return a .clone() in all but one of them",
            location=f"programs.{program.name}",
        )
    quantize = getattr(options, "quantize", "none")  # a field of some backends' options
    if quantize != "none":
        progress(f"quantizing {method.name} ({quantize})")
    try:
        return backend.prepare(exported, program.data_name, options, export, calibration_inputs(program, method))
    except Exception as exc:
        raise BuildError(
            f"preparing method {method.name!r} for {program.backend} failed: {summary_of(exc)}",
            location=f"programs.{program.name}",
        ) from exc


CALIBRATION_DRAWS = 4


def calibration_inputs(program: ProgramPlan, method: MethodPlan) -> list[tuple[Any, ...]]:
    """Inputs to calibrate quantization with: each check size, several seeded draws each."""
    from ptebuild.lowering.examples import check_sizes, make_inputs

    return [
        make_inputs(method, program.seed + 1 + draw, sizes)
        for sizes in check_sizes(method)
        for draw in range(CALIBRATION_DRAWS)
    ]


def lower(
    model: Any, program: ProgramPlan, inputs_by_method: dict[str, tuple[Any, ...]], staging: Path, progress: Progress,
    stages: StageClock | None = None,
) -> LoweredProgram:
    """Lower ``program`` and write its ``.pte`` (and ``.ptd``, and with ``etrecord`` its ETRecord)
    into ``staging``; ``stages`` hears when the export, lowering and emitting begin."""
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    stages = stages or StageClock()

    backend = get_backend(program.backend)
    options = backend.options_model.model_validate(program.options)
    try:
        model = backend.transform_model(model, options, program)
    except BuildError:
        raise
    except Exception as exc:
        raise BuildError(
            f"preparing the model for {program.backend} failed: {summary_of(exc)}",
            location=f"programs.{program.name}",
        ) from exc
    stages.begin(Stage.EXPORT)
    exported = {
        method.name: export_method(model, program, method, inputs_by_method[method.name], progress)
        for method in program.methods
    }
    stages.begin(Stage.LOWER)
    progress(f"lowering for {program.backend}")
    data_name = program.data_name
    problems: list[str] = []
    try:
        with backend.lowering_context(options):
            edge = to_edge_transform_and_lower(
                exported,
                partitioner=backend.partitioners(options, program),
                compile_config=EdgeCompileConfig(_check_ir_validity=False),
                generate_etrecord=program.etrecord,
            )
            figures = _figures(edge, program, problems)
            config = backend.emit_config(data_name, options)
            stages.begin(Stage.EMIT)
            progress("emitting the program")
            executorch_program = edge.to_executorch(config)
        backend.rewrite_keys(executorch_program, config)
    except BuildError:
        raise
    except Exception as exc:
        raise BuildError(
            f"lowering for {program.backend} failed: {summary_of(exc)}",
            location=f"programs.{program.name}",
        ) from exc
    staging.mkdir(parents=True, exist_ok=True)
    files = {}
    pte_path = staging / program.pte_name
    with open(pte_path, "wb") as out:
        executorch_program.write_to_file(out)
    files[program.pte_name] = pte_path
    for stem, cord in backend.data_files(executorch_program, data_name, program.name).items():
        ptd_path = staging / f"{stem}.ptd"
        with open(ptd_path, "wb") as out:
            cord.write_to_file(out)
        files[ptd_path.name] = ptd_path
    if program.etrecord_name:
        try:
            executorch_program.get_etrecord().save(str(staging / program.etrecord_name))
        except Exception as exc:
            raise BuildError(f"writing the ETRecord failed: {summary_of(exc)}", location=f"programs.{program.name}.etrecord") from exc
        files[program.etrecord_name] = staging / program.etrecord_name
    delegated = {
        name: sum(1 for _ in plan.delegates) for name, plan in _plans(executorch_program)
    }
    return LoweredProgram(files=files, methods=[m.name for m in program.methods], delegated=delegated, insight=figures,
                          problems=problems)


def _figures(edge: Any, program: ProgramPlan, problems: list[str]) -> ProgramInsight | None:
    """The lowered graphs' figures; None (and a line in ``problems``) if they cannot be counted:
    a program is not refused for its figures."""
    from ptebuild.lowering.insight import lowered_insight

    try:
        return lowered_insight(edge, program)
    except Exception as exc:
        problems.append(f"its delegation and memory figures could not be counted: {summary_of(exc)}")
        return None


def _plans(executorch_program: Any) -> list[tuple[str, Any]]:
    return [(plan.name, plan) for plan in executorch_program.executorch_program.execution_plan]


def summary_of(exc: BaseException) -> str:
    """``TypeName: the cause`` in one line (:func:`ptebuild.causes.describe`): a C++ exception's
    first line without its backtrace, a list's items (missing kernels, unsupported operators)."""
    return describe(exc).line
