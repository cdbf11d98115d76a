"""The ``executorch-llm`` model kind: ExecuTorch's own LLM definitions, through ExecuTorch's LLM export.

A model table names one of ExecuTorch 1.5.1's model classes (llama2, llama3, llama3_2, qwen2_5,
qwen3, phi_4_mini, smollm2, lfm2...: ``LlmConfig.base.model_class``), its params JSON, an optional
checkpoint and the tokenizer the runner uses (:mod:`.spec`); each program adds a backend and how
it is lowered (dtype, custom SDPA, quantization). ptebuild writes the manifest into an ``LlmConfig``
and runs upstream's own export (``export_llama_lib._export_llama``, what ``export_llm`` runs):
model loading, source transforms, quantization, partitioning and the metadata methods are
upstream's; ptebuild only takes over where the program is written (:mod:`.export`), to key the
weights by SHA-256 and name the mutable buffers, and then checks the program by generation
(:mod:`.generation`) and in ExecuTorch's own ``TextLLMRunner``.

Backends: those upstream's LLM export lowers for (portable, i.e. none enabled; XNNPACK; Vulkan;
Core ML; OpenVINO) go through it whole. CUDA, which it lacks, lowers upstream's exported model
with ptebuild's CUDA backend (its partitioner, weights file and keys), checked on the GPU by that
backend's own check. Other registered backends are refused with one line. Programs that
ExecuTorch's pip runtime runs here are checked by generation; Vulkan and Core ML ones by their
backend's structural check.

Nothing here imports torch or executorch; :mod:`.build` and :mod:`.generation` do, in a worker.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptebuild.backends.base import CheckTolerances
from ptebuild.models.base import BuildJob, BuiltProgram, ModelKind, ResolvedModel
from ptebuild.models.executorch_llm.programs import (
    FLOAT_TOKEN_AGREEMENT,
    GENERATION_CHECKED_BACKENDS,
    PTEBUILD_LOWERED_BACKENDS,
    QUANTIZED_TOKEN_AGREEMENT,
    data_file_names,
    token_agreement_floor,
    tokenizer_output,
)
from ptebuild.plan import DimPlan, InputPlan, MethodPlan

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ptebuild.backends.base import Backend
    from ptebuild.models.executorch_llm.spec import LlmModelSpec
    from ptebuild.plan import BuildPlan, ProgramPlan

UPSTREAM_BACKENDS = ("portable", "xnnpack", "vulkan", "coreml", "openvino")
"""Backends ExecuTorch 1.5.1's LLM export lowers for (portable: no backend enabled)."""
EXTERNAL_WEIGHTS_BACKENDS = ("xnnpack", "cuda")
"""Where a data name works: upstream's export writes a ``.ptd`` only for XNNPACK
(``export.foundation_weights_file``); the CUDA backend always writes one."""

FLOAT_CHECK = CheckTolerances(atol=1e-3, rtol=1e-4, min_cosine=0.9999)
"""Logits of a float32 program against the eager model: the summation order of XNNPACK's and the
portable kernels (seen on the tiny chat model: 4e-6 for XNNPACK with custom SDPA)."""
BF16_CHECK = CheckTolerances(atol=0.25, rtol=32 * 2.0**-7, min_cosine=0.999)
"""bfloat16 logits: one bfloat16 step at the logits' magnitude, or 32 steps of it (ptebuild.tolerances'
bfloat16 rtol)."""
QUANTIZED_CHECK = CheckTolerances(atol=0.5, rtol=0.2, min_cosine=0.99)
"""A quantized program against its quantized eager model (upstream's source transforms): int8
activations are rounded per token at run time by XNNPACK and in float by torchao's eager model,
layer after layer, so the error scales with the logits: seen on a decoder of Llama-3.2-1B's
dimensions (16 layers, 8da4w, 8-bit embeddings, its output layer tied to an N(0, 1) embedding),
3.51 at most (cosine 0.99987), which an absolute bound of 0.5 refused. The cosine and the token
agreement are what tell a wrong program."""


def forward_method(spec: LlmModelSpec) -> MethodPlan:
    """The program's ``forward`` as upstream exports it: int64 ``tokens [1, seq]`` (``seq`` up to
    ``max_seq_length - 1`` with a dynamic shape, else 1 with a KV cache or ``max_seq_length``
    without) and, with a KV cache, int64 ``input_pos [1]``; it returns the last position's logits.
    The values of its example inputs are token ids 0 to 9 at position 0: what a backend's own check
    (CUDA's) feeds it, and what the build report shows of the program's interface."""
    if spec.enable_dynamic_shape:
        tokens = InputPlan(name="tokens", shape=(1, "seq"), dtype="int64")
        dims: tuple[DimPlan, ...] = (DimPlan(name="seq", min=1, max=spec.max_seq_length - 1, example=min(3, spec.max_seq_length - 1)),)
    else:
        tokens = InputPlan(name="tokens", shape=(1, 1 if spec.use_kv_cache else spec.max_seq_length), dtype="int64")
        dims = ()
    # Example inputs start at position 0 (``high`` is exclusive): a call at any later position
    # could run past the KV cache with the longest prompt.
    position = InputPlan(name="input_pos", shape=(1,), dtype="int64", low=0, high=1)
    inputs = (tokens, position) if spec.use_kv_cache else (tokens,)
    return MethodPlan(name="forward", function="forward", inputs=inputs, dims=dims)


MULTIMETHOD_BACKENDS = ("portable", "xnnpack")
"""Backends ExecuTorch 1.5.1's multi-method LLM export lowers for (``export_llama_lib._validate_args``)."""


def _methods_problem(spec: LlmModelSpec, backend_name: str, options: Any, data_name: str | None) -> tuple[str, str] | None:
    """What ExecuTorch 1.5.1's multi-method export (``_export_llama_multimethod``) refuses or does
    not do, as ``(location under the program, message)``; None: it takes the program."""
    if backend_name not in MULTIMETHOD_BACKENDS:
        return ("options.methods", f"ExecuTorch's multi-method LLM export (1.5.1) lowers for XNNPACK or portable only, "
                                   f"not {backend_name}; use backend 'xnnpack' or 'portable', or remove methods")
    if options.adapter_checkpoint is not None:
        return ("options.adapter_checkpoint", "a program of several methods names each method's adapter in its "
                                              "entry of options.methods (ExecuTorch refuses base.lora_config with "
                                              "multimethod.methods); move it into a method")
    if data_name is not None:
        return ("data_name", "ExecuTorch's multi-method LLM export writes every weight into the .pte (the weights "
                             "its methods share stored once) and no weights file; remove data_name")
    seen: dict[str, int] = {}
    for index, method in enumerate(options.methods):
        if method.name in seen:
            return (f"options.methods[{index}].name", f"method {method.name!r} is named twice (also methods[{seen[method.name]}]); "
                                                      "give each method its own name")
        if method.name in spec.metadata:
            return (f"options.methods[{index}].name", f"{method.name!r} is a metadata method of the model (its metadata "
                                                      "table); give the method another name")
        seen[method.name] = index
    if "forward" not in seen:
        return ("options.methods", f"no method is named 'forward' ({', '.join(seen)}): ExecuTorch's TextLLMRunner, "
                                   "which checks the program and runs it, generates with forward; name one method 'forward'")
    return None


class ExecutorchLlmKind(ModelKind):
    name = "executorch-llm"
    generates_text = True
    no_etrecord = "its model kind (executorch-llm) lowers through ExecuTorch's LLM export, which writes none"
    no_test_cases = ("a language model's test case is a generation through its KV cache, which ExecuTorch's "
                     "BundledProgram (one call per case) does not hold; its check is the generation check")

    def spec_model(self) -> type[BaseModel]:
        from ptebuild.models.executorch_llm.spec import LlmModelSpec

        return LlmModelSpec

    def resolve(self, spec: Any, *, display: str, model_name: str, manifest_dir: Path, offline: bool = False) -> ResolvedModel:
        from ptebuild.errors import ManifestError
        from ptebuild.models.model_files import check_model_files

        fixes = {
            "params": "give the model's params JSON (dim, n_layers, n_heads, vocab_size...)",
            "tokenizer": "give a tokenizer.json, a tiktoken file or a SentencePiece model",
            "checkpoint": "give a checkpoint in ExecuTorch's Llama layout, or leave it out for random weights",
        }
        check_model_files(spec, fixes, display=display, model_name=model_name, manifest_dir=manifest_dir, offline=offline)
        if spec.checkpoint is not None and ("int8" in spec.checkpoint or "8da4w" in spec.checkpoint):
            raise ManifestError(
                f"{display}: models.{model_name}.checkpoint: ExecuTorch's model loader takes a checkpoint whose path holds "
                "'int8' or '8da4w' for one quantized so (examples/models/llama/model.py); rename it"
            )
        model_files: tuple[tuple[str, str], ...] = (("params", spec.params),) if spec.params else ()
        if spec.huggingface is not None and offline:
            model_files = (("huggingface", (Path(spec.huggingface) / "config.json").as_posix()),)
        elif spec.huggingface is not None:
            from ptebuild.models.executorch_llm.huggingface import FolderProblem, read_folder

            try:
                folder = read_folder(manifest_dir / spec.huggingface, spec.context_length)
            except FolderProblem as exc:
                raise ManifestError(f"{display}: models.{model_name}.huggingface: {spec.huggingface!r}: {exc}") from None
            model_files = tuple(("huggingface", (Path(spec.huggingface) / name).as_posix()) for name in folder.files)
        return ResolvedModel(
            methods={"forward": forward_method(spec)},
            seed=spec.seed,
            weights=spec.checkpoint,
            sources=tuple(spec.sources),
            model_files=(*model_files, ("tokenizer", spec.tokenizer)),
        )

    def program_options_model(self, backend_name: str) -> type[BaseModel] | None:
        from ptebuild.models.executorch_llm.spec import options_model

        if backend_name not in UPSTREAM_BACKENDS + PTEBUILD_LOWERED_BACKENDS:
            return None  # refused (program_problem): the schema offers no LLM options for it
        return options_model(backend_name)

    def program_problem(self, spec: Any, backend_name: str, backend: Backend, options: Any,
                        data_name: str | None) -> tuple[str, str] | None:
        supported = UPSTREAM_BACKENDS + PTEBUILD_LOWERED_BACKENDS
        if backend_name not in supported:
            return ("backend", f"ExecuTorch's LLM export (1.5.1) does not lower for {backend_name!r}; "
                               f"use one of {', '.join(supported)}")
        if options.methods is not None:
            problem = _methods_problem(spec, backend_name, options, data_name)
            if problem is not None:
                return problem
        if data_name is not None and backend_name not in EXTERNAL_WEIGHTS_BACKENDS and not backend.keeps_data_in_pte:
            return ("data_name", f"ExecuTorch's LLM export (1.5.1) writes a weights file only for XNNPACK "
                                 f"(export.foundation_weights_file); a {backend_name} program keeps its weights "
                                 "in the .pte: remove data_name")
        if options.adapter_checkpoint is not None and backend_name not in ("portable", "xnnpack"):
            return ("options.adapter_checkpoint", f"ExecuTorch's LLM export (1.5.1) applies a LoRA adapter for portable "
                                                  f"and XNNPACK programs, not {backend_name}; use backend 'xnnpack' or 'portable'")
        if options.lora_data_name is not None:
            if backend_name != "xnnpack" or data_name is None:
                return ("options.lora_data_name", "ExecuTorch's LLM export writes an adapter's own weights file for "
                                                  "XNNPACK beside the program's data_name (its foundation weights): "
                                                  + ("use backend 'xnnpack'" if backend_name != "xnnpack" else "set data_name"))
            if options.lora_data_name == data_name:
                return ("options.lora_data_name", f"is the program's data_name {data_name!r}: the adapter's weights "
                                                  "need a file of their own (the foundation file is shared); give it another name")
        if getattr(options, "qmode", None) == "4w" and backend_name in ("portable", "xnnpack"):
            # Seen with the chat model: the eager 4w model agrees with the float one (cosine 0.997),
            # the program does not (0.26); the portable one fails at its first call.
            seen = ("an XNNPACK program that computes something else (seen: cosine 0.26 against its eager model)"
                    if backend_name == "xnnpack" else "a portable program its runtime refuses (InvalidArgument at the first call)")
            return ("options.qmode", f"ExecuTorch 1.5.1's qmode '4w' (torchao's 4-bit weight-only linear layers) gives {seen}; "
                                     "use qmode = '8da4w' (4-bit weights, 8-bit dynamic activations) with group_size")
        if options.use_sdpa_with_kv_cache and not spec.use_kv_cache:
            return ("options.use_sdpa_with_kv_cache", "the custom SDPA works on the KV cache, and the model "
                                                       "has use_kv_cache = false; remove it or turn the KV cache on")
        if options.quantize_kv_cache and not spec.use_kv_cache:
            return ("options.quantize_kv_cache", "needs the model's use_kv_cache = true; set it, or remove quantize_kv_cache")
        if backend_name in ("coreml",) and spec.enable_dynamic_shape:
            return ("backend", "ExecuTorch's LLM export refuses a dynamic shape with Core ML; "
                               "set enable_dynamic_shape = false on the model")
        if backend_name == "vulkan" and options.dtype_override != "fp32":
            return ("options.dtype_override", "ExecuTorch's Vulkan LLM partitioner takes fp32 only; set dtype_override = 'fp32'")
        if backend_name == "vulkan" and spec.enable_dynamic_shape:
            return ("backend", "ExecuTorch 1.5.1's LLM export fails for Vulkan with a dynamic shape (seen: "
                               "AssertionError: graph_output_allocated not set); set enable_dynamic_shape = false on the model")
        if backend_name == "openvino":
            if spec.enable_dynamic_shape:
                return ("backend", "OpenVINO compiles each partition at fixed shapes in ExecuTorch 1.5.1; "
                                   "set enable_dynamic_shape = false on the model")
            if options.pt2e_quantize is None:  # upstream indexes its (empty) list of quantizers
                return ("options", "ExecuTorch 1.5.1's LLM export for OpenVINO compresses the weights with NNCF and fails "
                                   "without it (IndexError in _to_edge_and_lower_llama_openvino); set pt2e_quantize = "
                                   "'openvino_8wo' (8-bit weights) or 'openvino_4wo' (4-bit, in groups of group_size)")
        if backend_name in PTEBUILD_LOWERED_BACKENDS:
            if options.dtype_override != "bf16":
                return ("options.dtype_override", "ExecuTorch's CUDA attention takes bfloat16 only: set dtype_override = 'bf16'")
            if options.use_sdpa_with_kv_cache or options.qmode or options.embedding_quantize or options.quantize_kv_cache:
                return ("options", "a CUDA LLM program takes dtype_override only (the custom SDPA and "
                                   "ExecuTorch's LLM quantization are CPU kernels)")
            if spec.enable_dynamic_shape:  # seen on the H200 with torch 2.11: the KV cache's start_pos = input_pos[0].item()
                return ("backend", "ExecuTorch 1.5.1's CUDA backend cannot compile the LLM export's dynamic shape "
                                   "(AOTInductor, seen: PendingUnbackedSymbolNotFound from the KV cache's start position); "
                                   "set enable_dynamic_shape = false on the model (the prompt is then prefilled one token per call)")
        return None

    def check_defaults(self, backend: Backend, options: Any) -> CheckTolerances:
        if options.qmode or options.embedding_quantize or options.quantize_kv_cache or getattr(options, "pt2e_quantize", None):
            return QUANTIZED_CHECK
        return BF16_CHECK if options.dtype_override == "bf16" else FLOAT_CHECK

    def extra_outputs(self, program_name: str, resolved: ResolvedModel, options: Any) -> tuple[str, ...]:
        tokenizer = dict(resolved.model_files)["tokenizer"]
        lora = (f"{options.lora_data_name}.ptd",) if options.lora_data_name else ()
        return (tokenizer_output(program_name, tokenizer), *lora)

    def program_methods(self, methods: dict[str, MethodPlan], options: Any) -> dict[str, MethodPlan]:
        if options.methods is None:
            return methods
        forward = methods["forward"]
        return {method.name: dataclasses.replace(forward, name=method.name) for method in options.methods}

    def program_files(self, options: Any) -> tuple[tuple[str, str], ...]:
        return tuple(options.files())

    def build(self, job: BuildJob) -> BuiltProgram:
        from ptebuild.errors import BuildError
        from ptebuild.insight.stages import Stage
        from ptebuild.lowering.known_limits import explained
        from ptebuild.models.executorch_llm.build import build_program

        job.stages.begin(Stage.LOWER)  # its model, export, lowering and emitting, in one; its check begins with "checking"
        try:
            return build_program(job.program, job.manifest_dir, job.display, job.outputs, job.progress)
        except BuildError as error:  # a known limit of the toolchain, said so
            again = explained(error, job.program.backend)
            if again is error:
                raise
            raise again from error

    def generate(self, plan: BuildPlan, program: ProgramPlan, prompt: str, *, max_new_tokens: int,
                 out_dir: Path | None, audio: Path | None = None) -> Any:
        from ptebuild.models.executorch_llm.runner import generate_with_runner

        return generate_with_runner(plan, program, prompt, max_new_tokens=max_new_tokens, out_dir=out_dir)


KIND = ExecutorchLlmKind()

__all__ = ["FLOAT_TOKEN_AGREEMENT", "GENERATION_CHECKED_BACKENDS", "KIND", "PTEBUILD_LOWERED_BACKENDS", "QUANTIZED_TOKEN_AGREEMENT",
           "data_file_names", "token_agreement_floor", "tokenizer_output"]
