"""Lower one program: torch.export -> to_edge_transform_and_lower -> to_executorch -> files.

Runs in a worker process: imports torch and executorch. The program's files stream into a
content-addressed store as ExecuTorch's serializer writes them (hashed on the way, never copied
into one buffer: :meth:`ptebuild.store.cas.CAS.writer`); a folder names them (``<program>.pte``
links to its blob) for the check. Publishing them into the output folder is the builder's job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptebuild.backends import bound_backend
from ptebuild.causes import describe
from ptebuild.errors import TOOLCHAIN, BuildError, ManifestError
from ptebuild.insight.program import ProgramInsight
from ptebuild.insight.stages import Stage, StageClock
from ptebuild.lowering.binding import Binding, bind
from ptebuild.lowering.dims_fit import explain_dims, recurrent_layers
from ptebuild.lowering.fit import explain_misfit
from ptebuild.lowering.known_limits import explain, operators_of
from ptebuild.plan import DimPlan, InputPlan, MethodPlan, ProgramPlan
from ptebuild.results import OutputFile
from ptebuild.typos import did_you_mean

if TYPE_CHECKING:
    from ptebuild.store.cas import CAS

Progress = Callable[[str], None]


@dataclass
class LoweredProgram:
    """The files of a lowered program: stored blobs, and a folder naming them."""

    files: dict[str, Path]
    """Output file name (``policy.pte``, ``weights.ptd``) -> its path by that name (a link to
    its blob in the store)."""
    outputs: dict[str, OutputFile]
    """Output file name -> its digest and size (the blob's name in the store)."""
    methods: list[str]
    delegated: dict[str, int] = field(default_factory=dict)
    """Method -> number of delegate calls (0 for portable)."""
    warnings: list[str] = field(default_factory=list)
    """For the build's report: weights a program with a data name keeps inside its ``.pte``, figures
    that could not be counted."""
    insight: ProgramInsight | None = None
    """What the lowered graphs say (:func:`ptebuild.lowering.insight.lowered_insight`); None if
    they could not be counted (``warnings`` says why)."""

    def add(self, output: OutputFile, store: CAS, folder: Path) -> Path:
        """Note an output stored in ``store``; return its path by name in ``folder``."""
        self.outputs[output.name] = output
        self.files[output.name] = named_link(folder, output.name, store.path(output.sha256))
        return self.files[output.name]


def named_link(folder: Path, name: str, blob: Path) -> Path:
    """``folder/name``, a symbolic link to ``blob`` (a check reads the file by its own name)."""
    import os

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if path.is_symlink() or path.exists():
        path.unlink()
    os.symlink(blob, path)
    return path


def store_stream(store: CAS, name: str, write: Callable[[Any], None]) -> OutputFile:
    """Stream what ``write(file)`` writes into a new blob of ``store``: output ``name``, by content."""
    with store.writer() as out:
        write(out)
        digest, size = out.commit()
    return OutputFile(name, digest, size)


class StoredOutputs:
    """A model kind's outputs (:class:`ptebuild.models.base.Outputs`) streamed into ``store``, each
    named in ``folder`` by a link to its blob, as :func:`lower` stores a program's files."""

    def __init__(self, store: CAS, folder: Path) -> None:
        self.store, self.folder = store, folder
        self.program = LoweredProgram(files={}, outputs={}, methods=[])

    def stream(self, name: str, write: Callable[[Any], None]) -> Path:
        return self.program.add(store_stream(self.store, name, write), self.store, self.folder)

    def copy(self, name: str, source: Path) -> Path:
        digest, size = self.store.put_file(source)  # hashed while it streams
        return self.program.add(OutputFile(name, digest, size), self.store, self.folder)


class MethodModule:
    """Factory of a module whose ``forward`` calls one method of the model."""

    @staticmethod
    def wrap(model: Any, function: str, distinct: bool = False, contiguous: bool = False, binding: Binding | None = None) -> Any:
        """A module whose ``forward`` takes the method's declared inputs by position, in the
        declared order (what the exported program, and so ExecuTorch's runtime, takes), and
        calls ``function`` with them as ``binding`` says (:mod:`ptebuild.lowering.binding`;
        default: by position).

        ``distinct``: each output slot gets its own tensor (a tensor returned in several slots,
        or aliased by another slot, is cloned); ``contiguous``: a strided output is made
        contiguous. Both for runtimes that need it (:attr:`Backend.distinct_outputs`,
        :attr:`Backend.contiguous_outputs`); the eager check compares the outputs as always."""
        import torch

        class _Method(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, *args: Any) -> Any:
                call = getattr(self.model, function)
                out = call(*args) if binding is None else binding.call(call, args)
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
    dims = {d.name: _dim(torch, d) for d in method.dims}
    return tuple(_dynamic_spec(spec, dims) for spec in method.inputs)


def _dim(torch: Any, dim: DimPlan) -> Any:
    """torch.export's Dim for ``dim``: with ``multiple_of`` k, k times a Dim of blocks."""
    if dim.multiple_of == 1:
        return torch.export.Dim(dim.name, min=dim.min, max=dim.max)
    step = dim.multiple_of
    return step * torch.export.Dim(f"{dim.name}_blocks", min=dim.min // step, max=dim.max // step)


def export_key(method: MethodPlan, distinct: bool, contiguous: bool) -> tuple[Any, ...]:
    """What decides a method's first export, beside its model and the model's seed (whose
    example inputs it takes): an exported program made for one program serves another with the
    same key (:mod:`ptebuild.worker.model_memo`)."""
    return (method.name, method.function, repr(method.inputs), repr(method.dims), distinct, contiguous)


def export_method(model: Any, program: ProgramPlan, method: MethodPlan, example_inputs: tuple[Any, ...], progress: Progress,
                  samples: list[tuple[Any, ...]] | None = None, exports: dict[Any, Any] | None = None) -> Any:
    """The method exported and prepared for the program's backend (``samples`` calibrate static
    quantization). ``exports``: first exports of this model's methods by :func:`export_key`, used
    and filled (several programs of one model export each method once)."""
    import torch

    if not callable(getattr(model, method.function, None)):
        key = "function" if method.function != method.name else ""
        callables = [n for n in dir(model) if not n.startswith("_") and callable(getattr(model, n, None))]
        raise ManifestError(
            f"model {program.model!r} ({type(model).__name__}) has no callable {method.function!r}"
            f"{did_you_mean(method.function, callables)}; name one of its methods",
            location=f"models.{program.model}.methods.{method.name}" + (f".{key}" if key else ""),
        )
    function = getattr(model, method.function)
    arguments = bind(function, method, program.model)  # the inputs bound to its parameters by name
    shapes = dynamic_shapes(method)

    def export(module: Any) -> Any:
        """Export again a module that takes the inputs positionally (an unlifted graph)."""
        return torch.export.export(module, example_inputs, dynamic_shapes=shapes, strict=False)

    bound = bound_backend(program)
    backend, options = bound.backend, bound.options
    export_id = export_key(method, bool(backend.distinct_outputs), bool(backend.contiguous_outputs))
    exported = exports.get(export_id) if exports is not None else None
    try:
        if exported is None:
            progress(f"exporting {method.name}")
            # The method module's forward takes *args: its dynamic shapes are one entry, for ``args``.
            exported = torch.export.export(
                MethodModule.wrap(model, method.function, bool(backend.distinct_outputs), bool(backend.contiguous_outputs), arguments),
                example_inputs,
                dynamic_shapes=None if shapes is None else (shapes,),
                strict=False,
            )
            if exports is not None:
                exports[export_id] = exported
        else:
            progress(f"{method.name}: exported already, for another program of this model")
    except Exception as exc:
        # An input that does not fit the model fails eager PyTorch too: then the manifest is wrong.
        misfit = explain_misfit(function, arguments, method, program.model, example_inputs)
        if misfit is not None:
            raise misfit from exc
        pinned = explain_dims(_chained_text(exc), method, program.model, recurrent=recurrent_layers(model))
        if pinned is not None:
            raise pinned from exc
        raise BuildError(
            f"torch.export of method {method.name!r} failed: {summary_of(exc)}{known_limit(exc, program.backend)}",
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
        return backend.prepare(exported, program.data_name, options, export, calibration_inputs(program, method, samples))
    except Exception as exc:
        raise BuildError(
            f"preparing method {method.name!r} for {program.backend} failed: {summary_of(exc)}"
            f"{known_limit(exc, program.backend, operators_of(exported.graph_module))}",
            location=f"programs.{program.name}",
        ) from exc


CALIBRATION_DRAWS = 4


def calibration_inputs(program: ProgramPlan, method: MethodPlan, samples: list[tuple[Any, ...]] | None = None) -> list[tuple[Any, ...]]:
    """Inputs to calibrate quantization with: the method's samples (real inputs) if it has any,
    else each check size, several seeded draws each."""
    from ptebuild.lowering.examples import check_sizes, make_inputs

    if samples:
        return list(samples)
    return [
        make_inputs(method, program.seed + 1 + draw, sizes)
        for sizes in check_sizes(method)
        for draw in range(CALIBRATION_DRAWS)
    ]


def lower(
    model: Any, program: ProgramPlan, inputs_by_method: dict[str, tuple[Any, ...]], folder: Path, progress: Progress,
    store: CAS | None = None, samples: dict[str, list[tuple[Any, ...]]] | None = None, exports: dict[Any, Any] | None = None,
    stages: StageClock | None = None,
) -> LoweredProgram:
    """Lower ``program``: its ``.pte`` (and ``.ptd``, and with ``etrecord`` its ETRecord) stream
    into ``store`` (default: a store in ``folder/.objects``), named in ``folder``; ``stages``
    hears when the export, lowering and emitting begin. ``samples`` (method name -> its samples) calibrate
    static quantization. ``exports``: the model's first exports, shared with other programs of it
    (:func:`export_method`; not when the backend transforms the model).

    Export and lowering run under ``torch.no_grad()``, as ExecuTorch's own LLM export does: a
    buffer the model updates in place (a KV cache written with ``index_copy_``) from values that
    depend on parameters would otherwise be an autograd leaf written in place, which ExecuTorch's
    passes refuse ("a leaf Variable that requires grad is being used in an in-place operation").
    """
    import torch

    with torch.no_grad():
        return _lower(model, program, inputs_by_method, folder, progress, store, samples, exports, stages or StageClock())


def _lower(
    model: Any, program: ProgramPlan, inputs_by_method: dict[str, tuple[Any, ...]], folder: Path, progress: Progress,
    store: CAS | None, samples: dict[str, list[tuple[Any, ...]]] | None, exports: dict[Any, Any] | None,
    stages: StageClock,
) -> LoweredProgram:
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from ptebuild.lowering.insight import counted
    from ptebuild.lowering.weights import counted_weights, with_weights

    bound = bound_backend(program)
    backend, options = bound.backend, bound.options
    original = model
    try:
        model = backend.transform_model(model, options, program)
    except BuildError:
        raise
    except Exception as exc:
        raise BuildError(
            f"preparing the model for {program.backend} failed: {summary_of(exc)}{known_limit(exc, program.backend)}",
            location=f"programs.{program.name}",
        ) from exc
    notes = backend.transform_notes(model) if model is not original else []
    if model is not original:
        exports = None  # a transformed copy (torchao's 8da4w): its exports are its own
    stages.begin(Stage.EXPORT)
    exported = {
        method.name: export_method(model, program, method, inputs_by_method[method.name], progress,
                                   (samples or {}).get(method.name), exports)
        for method in program.methods
    }
    stages.begin(Stage.LOWER)
    progress(f"lowering for {program.backend}{_why_long(original)}")
    data_name = program.data_name
    # (A backend that always writes a data file, CUDA's compiled code, needs a data name anyway.)
    if data_name and not backend.requires_data_name and not any(ep.state_dict or ep.constants for ep in exported.values()):
        methods = ", ".join(repr(name) for name in exported)
        raise ManifestError(
            f"the model has no weights (no parameters, buffers or tensor constants in method{'s' if len(exported) > 1 else ''} "
            f"{methods}): there is nothing to put in '{data_name}.ptd'; remove data_name",
            location=f"programs.{program.name}.data_name",
        )
    problems: list[str] = list(notes)

    prepared_weights = counted_weights(exported, problems)

    def edge_with(partitioners: list[Any]) -> Any:
        return to_edge_transform_and_lower(exported, partitioner=partitioners, compile_config=EdgeCompileConfig(_check_ir_validity=False),
                                           generate_etrecord=program.etrecord)

    try:
        with backend.lowering_context(options):
            try:
                edge = edge_with(backend.partitioners(options, program))
            except Exception as exc:  # a known refusal of the backend's partitioning that narrower partitions avoid
                fallback = backend.fallback_partitioners(exc, options, program)
                if fallback is None:
                    raise
                partitioners, why = fallback
                progress(f"lowering for {program.backend} again: {why.split(':')[0]}")
                problems.append(why)
                edge = edge_with(partitioners)
            figures = counted(edge, program, problems)
            if figures is not None:
                figures = with_weights(figures, prepared_weights, problems)
            config = backend.emit_config(data_name, options)
            stages.begin(Stage.EMIT)
            progress("emitting the program")
            executorch_program = edge.to_executorch(config)
        if data_name:
            backend.place_weights(executorch_program, config, data_name)
        backend.rewrite_keys(executorch_program, config)
    except BuildError:
        raise
    except Exception as exc:
        raise BuildError(
            f"lowering for {program.backend} failed: {summary_of(exc)}"
            f"{known_limit(exc, program.backend, [n for ep in exported.values() for n in operators_of(ep.graph_module)])}",
            location=f"programs.{program.name}",
        ) from exc
    if store is None:
        from ptebuild.store.cas import CAS

        store = CAS(folder / ".objects")
    delegated = {
        name: sum(1 for _ in plan.delegates) for name, plan in _plans(executorch_program)
    }
    lowered = LoweredProgram(files={}, outputs={}, methods=[m.name for m in program.methods], delegated=delegated,
                             insight=figures, warnings=problems)
    lowered.add(store_stream(store, program.pte_name, executorch_program.write_to_file), store, folder)
    for stem, cord in backend.data_files(executorch_program, data_name, program.name).items():
        lowered.add(store_stream(store, f"{stem}.ptd", cord.write_to_file), store, folder)
    if program.etrecord_name:
        try:
            etrecord = store_stream(store, program.etrecord_name, executorch_program.get_etrecord().save)
        except Exception as exc:
            raise BuildError(f"writing the ETRecord failed: {summary_of(exc)}; {TOOLCHAIN}", location=f"programs.{program.name}.etrecord") from exc
        lowered.add(etrecord, store, folder)
    if data_name:
        from ptebuild.runtime.weights_in_pte import describe, weights_in_pte

        kept = weights_in_pte(lowered.files[program.pte_name], backend.code_in_named_data)
        if kept:
            lowered.warnings.append(describe(kept, data_name, program.backend))
    return lowered


def _plans(executorch_program: Any) -> list[tuple[str, Any]]:
    return [(plan.name, plan) for plan in executorch_program.executorch_program.execution_plan]


def _chained_text(exc: BaseException) -> str:
    """The messages of ``exc`` and of the exceptions it was raised from or during."""
    from ptebuild.causes import chain

    return "\n".join(str(e) for e in chain(exc))


def known_limit(exc: BaseException, backend: str, operators: Iterable[str] = ()) -> str:
    """The clause a toolchain failure's line ends with: ``; known limit of ...: what to do`` when
    ``exc`` is a known failure of the toolchain (:mod:`ptebuild.lowering.known_limits`), else
    ``; `` :data:`~ptebuild.errors.TOOLCHAIN` (change the model, or report it upstream)."""
    found = explain(describe(exc).text, operators, backend)
    return f"; {found.advice() if found else TOOLCHAIN}"


def summary_of(exc: BaseException) -> str:
    """``TypeName: the cause`` in one line (:func:`ptebuild.causes.describe`): a C++ exception's
    first line without its backtrace, a list's items (missing kernels, unsupported operators)."""
    return describe(exc).line


def _why_long(model: Any) -> str:
    """Why a lowering may take minutes, where the model says so: its recurrent layers, whose
    operator the lowering decomposes into the operators of every step of the sequence (a 101-step
    GRU lowered on XNNPACK in 6-7 minutes); empty otherwise."""
    from ptebuild.lowering.dims_fit import recurrent_layers

    layers = recurrent_layers(model)
    if not layers:
        return ""
    shown = ", ".join(f"{cls} {name!r}" for name, cls in layers[:2]) + (" and more" if len(layers) > 2 else "")
    steps = "steps" if len(layers) == 1 else "steps each"
    return (f" (the {shown} becomes the operators of all its {steps} of the sequence: a lowering that grows with "
            "its length and can take minutes)")

