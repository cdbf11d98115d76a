"""Export an ``executorch-llm`` program with ExecuTorch's own LLM export, writing it ptebuild's way.

:func:`llm_config` writes the manifest's model and program into upstream's ``LlmConfig``; then
:func:`export_with_upstream` runs ``export_llama_lib._export_llama`` on it, the function
``python -m executorch.extension.llm.export.export_llm`` runs: model loading (params, checkpoint
by ``torch.load(mmap=True)``, or random weights), source transforms (custom SDPA and KV cache,
quantization), export, partitioning, lowering and the metadata methods are upstream's, step for
step. ptebuild replaces only where the result is written (``LLMEdgeManager.save_to_pte``, for the
duration of the call): :func:`write_program` gives the mutable buffers their names and keys the
external weights by SHA-256 (the backend's ``rewrite_keys``, as for every other program), then
streams the ``.pte`` and ``.ptd`` into the worker's outputs (its task's store). Upstream's own writer would name weights
by parameter name, so a ``.ptd`` of another model of the same shape would load silently.

CUDA, which upstream's LLM export does not lower for, takes upstream's model and export (the
same ``LlmConfig`` with no backend enabled, up to ``LLMEdgeManager.export``) and lowers it with
ptebuild's CUDA backend (:func:`export_with_backend`), its attention's masks made boolean as the
CUDA kernel takes them (:mod:`.cuda_attention`).

Imports torch and executorch when called (a worker).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptebuild.backends import get_backend
from ptebuild.causes import describe
from ptebuild.errors import REPORT, TOOLCHAIN, BuildError
from ptebuild.insight.program import ProgramInsight
from ptebuild.models.base import Outputs
from ptebuild.models.executorch_llm.model_fit import explain_model_files
from ptebuild.models.executorch_llm.spec import LlmModelSpec, LlmOptions, LlmXnnpackOptions
from ptebuild.plan import ProgramPlan

DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


@dataclass
class ExportedLlm:
    """What one export left: the files written, the eager model upstream exported (after its
    source transforms: quantized for a quantized program), the delegate calls per method, and the
    fully qualified names of the buffers the program mutates (its KV cache)."""

    files: dict[str, Path]
    model: Any
    method_models: dict[str, Any] = field(default_factory=dict)
    """A multi-method program's eager model of each method, by name (the model, or the model with the
    method's LoRA adapter, after upstream's source transforms); empty for a program of one ``forward``."""
    delegated: dict[str, int] = field(default_factory=dict)
    mutable_buffers: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    insight: ProgramInsight | None = None
    """The lowered program's figures (delegation, mutable buffers, inputs' and outputs' bytes),
    counted on the edge program before it is emitted (:func:`ptebuild.lowering.insight.counted`)."""
    warnings: tuple[str, ...] = ()
    """Figures that could not be counted (one line each)."""


def llm_config(spec: LlmModelSpec, options: LlmOptions, program: ProgramPlan, manifest_dir: Path,
               metadata: dict[str, Any], backend: str | None) -> Any:
    """Upstream's ``LlmConfig`` for ``program``. ``backend``: the one to enable in it (None: none,
    upstream's portable path)."""
    from executorch.extension.llm.export.config.llm_config import (
        DtypeOverride,
        LlmConfig,
        ModelType,
    )

    config = LlmConfig()
    config.base.model_class = ModelType(spec.model_class or "llama3")
    assert spec.params is not None  # a Hugging Face folder is converted into params first (build.py)
    config.base.params = str(manifest_dir / spec.params)
    config.base.checkpoint = str(manifest_dir / spec.checkpoint) if spec.checkpoint else None
    config.base.tokenizer_path = str(manifest_dir / spec.tokenizer)
    config.base.metadata = json.dumps(metadata, sort_keys=True)
    config.model.use_kv_cache = spec.use_kv_cache
    config.model.enable_dynamic_shape = spec.enable_dynamic_shape
    config.model.dtype_override = DtypeOverride(options.dtype_override)
    config.model.use_sdpa_with_kv_cache = options.use_sdpa_with_kv_cache
    config.model.quantize_kv_cache = options.quantize_kv_cache
    config.export.max_seq_length = spec.max_seq_length
    config.export.max_context_length = spec.context_length
    config.export.output_name = program.pte_name
    config.quantization.qmode = options.qmode
    config.quantization.group_size = options.group_size
    config.quantization.embedding_quantize = options.embedding_quantize
    if options.adapter_checkpoint is not None:
        config.base.lora_config = _lora_config(manifest_dir, options.adapter_checkpoint, str(options.adapter_config))
    if options.methods is not None:
        from executorch.extension.llm.export.config.llm_config import MethodConfig

        config.multimethod.methods = [
            MethodConfig(method_name=method.name, lora_config=None if method.adapter_checkpoint is None else
                         _lora_config(manifest_dir, method.adapter_checkpoint, str(method.adapter_config)))
            for method in options.methods
        ]
        config.multimethod.share_mutable_buffers = options.share_mutable_buffers
    if backend == "xnnpack":
        config.backend.xnnpack.enabled = True
        config.backend.xnnpack.extended_ops = options.extended_ops  # type: ignore[attr-defined]
        config.backend.xnnpack.enable_bf16 = options.enable_bf16  # type: ignore[attr-defined]
        # The tag of every weight outside the delegates' own: the .ptd's name; a LoRA adapter's
        # weights (nodes named ...lora...) are tagged with their own file's.
        config.export.foundation_weights_file = program.data_name
        config.export.lora_weights_file = options.lora_data_name
    elif backend == "vulkan":
        config.backend.vulkan.enabled = True
        config.backend.vulkan.force_fp16 = options.force_fp16  # type: ignore[attr-defined]  # an LlmVulkanOptions
    elif backend == "coreml":
        from executorch.extension.llm.export.config.llm_config import CoreMLComputeUnit, CoreMLQuantize

        coreml = config.backend.coreml
        coreml.enabled = True
        coreml.ios = options.ios  # type: ignore[attr-defined]
        coreml.compute_units = CoreMLComputeUnit(options.compute_units)  # type: ignore[attr-defined]
        quantize = options.quantize  # type: ignore[attr-defined]
        coreml.quantize = CoreMLQuantize(quantize) if quantize else None
        coreml.enable_state = options.enable_state  # type: ignore[attr-defined]
        coreml.preserve_sdpa = options.preserve_sdpa  # type: ignore[attr-defined]
    elif backend == "openvino":
        from executorch.extension.llm.export.config.llm_config import Pt2eQuantize

        openvino = config.backend.openvino
        openvino.enabled = True
        openvino.device = options.device  # type: ignore[attr-defined]  # an LlmOpenvinoOptions
        openvino.openvino_awq = options.awq  # type: ignore[attr-defined]
        openvino.openvino_scale_estimation = options.scale_estimation  # type: ignore[attr-defined]
        config.quantization.pt2e_quantize = Pt2eQuantize(options.pt2e_quantize)  # type: ignore[attr-defined]
    return config


def _lora_config(manifest_dir: Path, adapter_checkpoint: str, adapter_config: str) -> Any:
    from executorch.extension.llm.export.config.llm_config import LoraConfig

    return LoraConfig(adapter_checkpoint=str(manifest_dir / adapter_checkpoint), adapter_config=str(manifest_dir / adapter_config))


@contextlib.contextmanager
def _keeps_managers(managers: list[Any]) -> Iterator[None]:
    """While the block runs, each ``LLMEdgeManager`` upstream's export prepares (one per method of a
    multi-method export, in the methods' order) is also appended to ``managers``: upstream keeps
    only the first, and the check needs each method's eager model."""
    from executorch.examples.models.llama import export_llama_lib

    original = export_llama_lib._prepare_for_llama_export

    def prepare(config: Any) -> Any:
        manager = original(config)
        managers.append(manager)
        return manager

    export_llama_lib._prepare_for_llama_export = prepare
    try:
        yield
    finally:
        export_llama_lib._prepare_for_llama_export = original


@contextlib.contextmanager
def _metadata_kept(metadata: dict[str, Any]) -> Iterator[None]:
    """While the block runs, each ``LLMEdgeManager`` keeps the ``get_max_seq_len`` of ``metadata``:
    upstream's ``__init__`` sets it to ``max_seq_len`` after taking the metadata it was given, so an
    override (``LlmConfig.base.metadata``) was dropped silently."""
    from executorch.extension.llm.export.builder import LLMEdgeManager

    original = LLMEdgeManager.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if "get_max_seq_len" in metadata:
            self.metadata["get_max_seq_len"] = metadata["get_max_seq_len"]

    LLMEdgeManager.__init__ = __init__
    try:
        yield
    finally:
        LLMEdgeManager.__init__ = original


@contextlib.contextmanager
def _saves_through(write: Callable[[Any], None]) -> Iterator[None]:
    """While the block runs, ``LLMEdgeManager.save_to_pte(name)`` calls ``write(manager)`` instead
    of upstream's ``save_pte_program`` (the one step of upstream's export ptebuild does itself)."""
    from executorch.extension.llm.export.builder import LLMEdgeManager

    original = LLMEdgeManager.save_to_pte

    def save_to_pte(self: Any, output_name: str) -> None:
        write(self)
        self._saved_pte_filename = output_name

    LLMEdgeManager.save_to_pte = save_to_pte
    try:
        yield
    finally:
        LLMEdgeManager.save_to_pte = original


@contextlib.contextmanager
def _counts_before_emitting(program: ProgramPlan, found: dict[str, Any]) -> Iterator[None]:
    """While the block runs, ``LLMEdgeManager.to_executorch`` first counts the lowered edge
    program's figures into ``found`` (``insight``, ``warnings``): on the graphs as upstream's
    ``to_edge_transform_and_lower`` (or ``to_backend``) left them, as ``get_delegation_info``
    counts them, before emitting adds its memory-planning nodes to them."""
    from executorch.extension.llm.export.builder import LLMEdgeManager

    from ptebuild.lowering.insight import counted

    original = LLMEdgeManager.to_executorch

    def to_executorch(self: Any, *args: Any, **kwargs: Any) -> Any:
        problems: list[str] = []
        figures = counted(self.edge_manager, program, problems)
        found["insight"] = figures.worker_part() if figures is not None else None
        found["warnings"] = tuple(problems)
        return original(self, *args, **kwargs)

    LLMEdgeManager.to_executorch = to_executorch
    try:
        yield
    finally:
        LLMEdgeManager.to_executorch = original


@contextlib.contextmanager
def prepared_quietly(metadata: dict[str, Any]) -> Iterator[None]:
    """What upstream's model preparation runs in here: its progress on stderr, the metadata kept."""
    with _quiet_stdout(), _metadata_kept(metadata):
        yield


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """Upstream prints progress ("Checkpoint not provided...") on stdout, which may be an
    executor's channel: send it to stderr (the program's log)."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def export_with_upstream(spec: LlmModelSpec, options: LlmOptions, program: ProgramPlan, manifest_dir: Path,
                         metadata: dict[str, Any], outputs: Outputs) -> ExportedLlm:
    """Run upstream's LLM export for ``program``'s backend; write its files through ``outputs``."""
    from executorch.examples.models.llama import export_llama_lib

    backend = None if program.backend == "portable" else program.backend
    config = llm_config(spec, options, program, manifest_dir, metadata, backend)
    written: dict[str, Any] = {}
    found: dict[str, Any] = {}
    managers: list[Any] = []

    def write(manager: Any) -> None:
        written.update(write_program(manager.export_program, program, outputs, options.lora_data_name))

    try:
        with _saves_through(write), _counts_before_emitting(program, found), _keeps_managers(managers), \
                _metadata_kept(metadata), _quiet_stdout():
            builder = export_llama_lib._export_llama(config)
    except BuildError:
        raise
    except Exception as exc:
        misfit = explain_model_files(exc, spec, program.model)
        if misfit is not None:
            raise misfit from exc
        raise BuildError(
            f"ExecuTorch's LLM export for {program.backend} failed: {describe(exc).line}; {TOOLCHAIN}",
            location=f"programs.{program.name}",
        ) from exc
    if not written:
        raise BuildError(f"ExecuTorch's LLM export finished without writing a program; {REPORT}", location=f"programs.{program.name}")
    model = builder.model
    metadata_written = dict(builder.metadata)
    method_models: dict[str, Any] = {}
    if options.methods is not None:
        if len(managers) != len(options.methods):
            raise BuildError(f"ExecuTorch's multi-method LLM export prepared {len(managers)} models for "
                             f"{len(options.methods)} methods; {REPORT}", location=f"programs.{program.name}")
        method_models = {method.name: manager.model for method, manager in zip(options.methods, managers, strict=True)}
    # What the lowering held (the edge and executorch programs, the serialized bytes) goes now:
    # the check needs only the eager models and the files.
    for manager in (builder, *managers):
        manager.export_program = manager.edge_manager = manager.pre_autograd_graph_module = None
    del managers
    warnings = (*found.get("warnings", ()), *_undelegated(program, options, written["delegated"]))
    return ExportedLlm(files=written["files"], model=model, method_models=method_models, delegated=written["delegated"],
                       mutable_buffers=written["mutable_buffers"], metadata=metadata_written,
                       insight=found.get("insight"), warnings=warnings)


def _undelegated(program: ProgramPlan, options: LlmOptions, delegated: dict[str, int]) -> tuple[str, ...]:
    """A warning where a backend's program has no delegate at all: it runs in ExecuTorch's portable
    kernels, which its backend was chosen to avoid (XNNPACK leaves bfloat16 to them unless told)."""
    if program.backend == "portable" or any(delegated.values()):
        return ()
    hint = ""
    if isinstance(options, LlmXnnpackOptions) and options.dtype_override == "bf16" and not options.enable_bf16:
        hint = "; XNNPACK takes bfloat16 operators only with options.enable_bf16 = true (the device needs its bf16 kernels)"
    elif program.backend == "xnnpack" and options.qmode == "int8":
        hint = ("; qmode 'int8' makes each linear layer ExecuTorch's weight-only int8 operator, which XNNPACK does not "
                "take: XNNPACK's is qmode '8da4w'")
    return (f"nothing in it was delegated to {program.backend}: every operator runs in ExecuTorch's portable kernels{hint}",)


def export_with_backend(spec: LlmModelSpec, options: LlmOptions, program: ProgramPlan, manifest_dir: Path,
                        metadata: dict[str, Any], outputs: Outputs) -> ExportedLlm:
    """Upstream's model and export (``LlmConfig`` with no backend), lowered by ptebuild's backend:
    its partitioners, ``ExecutorchBackendConfig``, weights file and keys (for CUDA)."""
    import torch
    from executorch.examples.models.llama import export_llama_lib
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from ptebuild.lowering.insight import counted
    from ptebuild.models.executorch_llm.spec import backend_options as own_options

    backend = get_backend(program.backend)
    backend_options = backend.options_model.model_validate(own_options(program.backend, options))
    config = llm_config(spec, options, program, manifest_dir, metadata, None)
    problems: list[str] = []
    try:
        with _quiet_stdout(), _metadata_kept(metadata):
            manager = export_llama_lib._prepare_for_llama_export(config)
            if program.backend == "cuda":  # its attention kernel takes boolean 4-dim masks only
                from ptebuild.models.executorch_llm.cuda_attention import use_boolean_masks

                use_boolean_masks(manager.model)
            manager.export()
            exported = manager._export(manager.pre_autograd_graph_module)
        with backend.lowering_context(backend_options), torch.no_grad():
            edge = to_edge_transform_and_lower(
                {"forward": exported},
                partitioner=backend.partitioners(backend_options, program),
                compile_config=EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=True),
                constant_methods=manager.metadata,
            )
            figures = counted(edge, program, problems)
            emit = backend.emit_config(program.data_name, backend_options)
            executorch_program = edge.to_executorch(emit)
        backend.rewrite_keys(executorch_program, emit)
    except BuildError:
        raise
    except Exception as exc:
        misfit = explain_model_files(exc, spec, program.model)
        if misfit is not None:
            raise misfit from exc
        raise BuildError(
            f"lowering ExecuTorch's LLM export for {program.backend} failed: {describe(exc).line}; {TOOLCHAIN}",
            location=f"programs.{program.name}",
        ) from exc
    written = _write(executorch_program, program, outputs, backend)
    model = manager.model
    metadata_written = dict(manager.metadata)
    del executorch_program, edge, exported
    manager.pre_autograd_graph_module = None
    return ExportedLlm(files=written["files"], model=model, delegated=written["delegated"],
                       mutable_buffers=written["mutable_buffers"], metadata=metadata_written,
                       insight=figures.worker_part() if figures is not None else None, warnings=tuple(problems))


def write_program(executorch_program: Any, program: ProgramPlan, outputs: Outputs, lora_data_name: str | None = None,
                  config: Any = None) -> dict[str, Any]:
    """Name the mutable buffers, key the weights by SHA-256 and write the ``.pte`` and ``.ptd``.

    ``executorch_program``: the ``ExecutorchProgramManager`` that ``to_executorch`` made with
    ``config`` (None: upstream's LLM export's, ``ExecutorchBackendConfig(extract_delegate_segments=True)``
    with default alignments, what ``LLMEdgeManager.to_executorch`` passes), so serializing it again
    gives the same layout.
    """
    from executorch.exir import ExecutorchBackendConfig

    backend = get_backend(program.backend)
    config = config if config is not None else ExecutorchBackendConfig(extract_delegate_segments=True)
    mutable = name_mutable_buffers(executorch_program)
    backend.rewrite_keys(executorch_program, config)
    if mutable and not executorch_program._emitter_output.external_constant_map:
        _serialize_again(executorch_program, config)  # the key pass did not (nothing to rename)
    written = _write(executorch_program, program, outputs, backend, lora_data_name)
    written["mutable_buffers"] = mutable
    return written


def _serialize_again(executorch_program: Any, config: Any) -> None:
    from executorch.exir._serialize._serialize import serialize_for_executorch

    # The first serialization goes before the second is made: never two of the weights file at once.
    executorch_program._pte_data = executorch_program._tensor_data = executorch_program._buffer = None
    executorch_program._pte_data, executorch_program._tensor_data = serialize_for_executorch(
        executorch_program._emitter_output, config, executorch_program._data_serializer, executorch_program._named_data
    )
    executorch_program._buffer = None


def _write(executorch_program: Any, program: ProgramPlan, outputs: Outputs, backend: Any,
           lora_data_name: str | None = None) -> dict[str, Any]:
    """Stream the ``.pte`` and each ``.ptd`` into ``outputs``: the program's ``data_name`` (the
    backend's files) and, for a LoRA adapter, ``lora_data_name`` (upstream's LoRA weights file)."""
    files = {program.pte_name: outputs.stream(program.pte_name, executorch_program.write_to_file)}
    data = dict(backend.data_files(_without(executorch_program, lora_data_name), program.data_name, program.name))
    if lora_data_name is not None:
        lora = (executorch_program._tensor_data or {}).get(lora_data_name)
        if lora is None:
            raise BuildError(f"ExecuTorch's LLM export wrote no LoRA weights into '{lora_data_name}.ptd' (is the "
                             "adapter's target_modules empty?); give the adapter target_modules of the model", location=f"programs.{program.name}")
        data[lora_data_name] = lora
    for stem, cord in data.items():
        files[f"{stem}.ptd"] = outputs.stream(f"{stem}.ptd", cord.write_to_file)
    plans = executorch_program.executorch_program.execution_plan
    methods = {method.name for method in program.methods}
    delegated = {plan.name: len(plan.delegates) for plan in plans if plan.name in methods}
    return {"files": files, "delegated": delegated, "mutable_buffers": ()}


class _without:
    """``executorch_program`` as the backend's :meth:`data_files` sees it: without the LoRA file."""

    def __init__(self, executorch_program: Any, stem: str | None) -> None:
        self._tensor_data = {k: v for k, v in (executorch_program._tensor_data or {}).items() if k != stem}


def name_mutable_buffers(executorch_program: Any) -> tuple[str, ...]:
    """Give each mutable buffer of each method (``forward``, or every method of a multi-method
    program) its name in the program, as ExecuTorch's emitter does with
    ``ExecutorchBackendConfig(emit_mutable_buffer_names=True)`` (which upstream's LLM export does
    not pass); return the names (each once: the methods of one model mutate buffers of the same names).

    The emitter gives every placeholder of the graph one value, in the graph's order, before any
    other: the value at a placeholder's position is its tensor. A mutated buffer's tensor is
    memory planned and holds no data; it gets ``extra_tensor_info`` with its fully qualified name
    and the location ``SEGMENT`` (its bytes stay planned memory: nothing is loaded for it).
    """
    names: list[str] = []
    for method in sorted(executorch_program.methods):
        names += [name for name in _name_mutable_buffers(executorch_program, method) if name not in names]
    return tuple(names)


def _name_mutable_buffers(executorch_program: Any, method: str) -> list[str]:
    from executorch.exir.schema import ExtraTensorInfo, Tensor, TensorDataLocation

    exported = executorch_program.exported_program(method)
    signature = exported.graph_signature
    mutated = set(signature.buffers_to_mutate.values())
    placeholders = [node for node in exported.graph.nodes if node.op == "placeholder"]
    plan = next(p for p in executorch_program._emitter_output.program.execution_plan if p.name == method)
    names: list[str] = []
    by_placeholder = {spec.arg.name: spec.target for spec in signature.input_specs if getattr(spec.arg, "name", None)}
    for index, node in enumerate(placeholders):
        target = by_placeholder.get(node.name)
        if target not in mutated or index >= len(plan.values):
            continue
        tensor = plan.values[index].val
        if not isinstance(tensor, Tensor) or tensor.allocation_info is None or tensor.data_buffer_idx != 0:
            raise BuildError(f"mutable buffer {target!r} is not the planned tensor at value {index} of {method!r}; {REPORT}")
        if tensor.extra_tensor_info is None:
            tensor.extra_tensor_info = ExtraTensorInfo(fully_qualified_name=target, location=TensorDataLocation.SEGMENT)
        names.append(str(target))
    return names


def dtype_name(options: LlmOptions) -> str:
    return DTYPES[options.dtype_override]
