"""Build one ``executorch-llm`` program in a worker: tokenizer, metadata, export, files, check.

1. The tokenizer is loaded as ExecuTorch's runner loads it and checked against the model's
   ``vocab_size`` (:mod:`.tokenizer`); a misfit is one line at ``models.NAME.tokenizer``. Only its
   facts are kept through the export (the build's peak of memory); the check loads it again.
2. The metadata methods: upstream's (``get_max_seq_len``, ``get_max_context_len``, ``get_n_layers``,
   ``get_vocab_size``, ``use_kv_cache``, ``use_sdpa_with_kv_cache``, ``enable_dynamic_shape``,
   written by ``LLMEdgeManager``), plus ``get_bos_id`` and ``get_eos_ids`` from the tokenizer (a
   Hugging Face folder's ``eos_token_id`` ids added to its EOS), with the manifest's ``metadata``
   over them (all given to upstream as ``LlmConfig.base.metadata``).
3. The export (:mod:`.export`). Without a checkpoint the model's random weights are made here,
   seeded, by ExecuTorch's own model definition constructed on the CPU (:func:`random_checkpoint`),
   and given to the export as its checkpoint: upstream's export without one builds the model on
   the meta device and then only resets modules that have ``reset_parameters``, leaving RMSNorm
   weights and the RoPE tables as uninitialized memory (seen: logits of 1e-18, then NaN; never
   the same twice).
4. The tokenizer is copied beside the program (``<program>.<file name>``), streamed.

5. The check (:mod:`.generation`) against the eager model the export left.

Every file is written as a stream through the worker's :class:`~ptebuild.models.base.Outputs`
(into the task's store, hashed on the way), never read whole into memory. The worker's allocator
maps every block of 128 KiB or more on its own for the build (:mod:`ptebuild.heap`): a block
upstream's export frees goes back to the system at once instead of staying in glibc's heap.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ptebuild.errors import ManifestError
from ptebuild.figures import CheckFigures, GenerationFigures, as_figures
from ptebuild.lowering.check import WrongProgram
from ptebuild.models.base import BuiltProgram, Outputs, Progress
from ptebuild.models.executorch_llm.programs import (
    GENERATION_CHECKED_BACKENDS,
    PTEBUILD_LOWERED_BACKENDS,
    data_file_names,
    token_agreement_floor,
)
from ptebuild.plan import ProgramPlan

GENERATION_CHECK = "executorch-llm-generation"
"""The check's name: prefill, teacher-forced greedy decode and ExecuTorch's TextLLMRunner."""


def read_params(params: Path, display: str, where: str) -> dict[str, Any]:
    """The model's params JSON (ExecuTorch's ``ModelArgs`` fields). Raises ManifestError at ``where``."""
    try:
        data = json.loads(params.read_text())
    except (OSError, ValueError) as exc:
        raise ManifestError(f"{params.name} is not a params JSON: {exc}; give ExecuTorch's params JSON of the model",
                            manifest=display, location=where) from None
    if not isinstance(data, dict):
        raise ManifestError(f"{params.name} is not a JSON object of the model's params; give ExecuTorch's params JSON of the model",
                            manifest=display, location=where)
    return data


def params_vocab_size(params: dict[str, Any]) -> int:
    """The model's ``vocab_size``: from its params, else ExecuTorch's ``ModelArgs`` default."""
    if "vocab_size" in params:
        return int(params["vocab_size"])
    from executorch.examples.models.llama.model_args import ModelArgs

    return int(ModelArgs().vocab_size)


def quantization_fits(options: Any, params: dict[str, Any], params_name: str, display: str, program: ProgramPlan) -> None:
    """ManifestError at the program's ``options.qmode`` where upstream's quantizer cannot take the
    model: ``int8`` (``WeightOnlyInt8QuantHandler``) swaps each linear layer for one without a bias,
    and a model whose attention has q/k/v biases (Qwen2's) fails to load into it."""
    if getattr(options, "qmode", None) == "int8" and params.get("attention_qkv_bias"):
        raise ManifestError(
            f"qmode 'int8' (ExecuTorch's weight-only int8 linear layers, which have no bias) cannot take this model: "
            f"its attention's q, k and v have biases (attention_qkv_bias, {params_name}) and ExecuTorch's export fails "
            "loading them; use qmode = '8da4w' (with group_size), or remove qmode",
            manifest=display, location=f"programs.{program.name}.options.qmode",
        )


def build_program(program: ProgramPlan, manifest_dir: Path, display: str, outputs: Outputs, progress: Progress) -> BuiltProgram:
    from ptebuild import heap
    from ptebuild.models.executorch_llm.export import export_with_backend, export_with_upstream
    from ptebuild.models.executorch_llm.spec import LlmModelSpec, options_model
    from ptebuild.models.executorch_llm.tokenizer import check_fits, read_facts

    started = time.monotonic()
    heap.return_large_frees()  # the weights' copies upstream frees go back to the system, not into the heap
    spec = LlmModelSpec.model_validate(program.model_entry)
    options = options_model(program.backend).model_validate(program.options)
    where = f"models.{program.model}"
    progress("reading the tokenizer")
    tokenizer = read_facts(manifest_dir / spec.tokenizer, display, f"{where}.tokenizer")  # loaded again for the check
    huggingface = _read_huggingface(spec, manifest_dir, display, where) if spec.huggingface else None
    if huggingface is not None:
        params, params_name = huggingface.params, f"{spec.huggingface}/config.json"
    else:
        assert spec.params is not None  # the table gives params or huggingface
        params, params_name = read_params(manifest_dir / spec.params, display, f"{where}.params"), spec.params
    check_fits(tokenizer, params_vocab_size(params), display, f"{where}.tokenizer", params_name)
    quantization_fits(options, params, params_name, display, program)
    eos_ids = [tokenizer.eos, *(i for i in (huggingface.eos_ids if huggingface else ()) if i != tokenizer.eos)]
    metadata: dict[str, Any] = {"get_bos_id": tokenizer.bos, "get_eos_ids": eos_ids, **prefill_chunk(spec), **spec.metadata}

    scratch = _scratch()
    try:
        if huggingface is not None:
            from ptebuild.models.executorch_llm.huggingface import convert

            progress(f"converting the Hugging Face {huggingface.model_type} weights with ExecuTorch's converter")
            params_file, checkpoint = convert(manifest_dir / str(spec.huggingface), huggingface, scratch)
            spec = spec.model_copy(update={"params": str(params_file), "checkpoint": str(checkpoint),
                                           "model_class": spec.model_class or huggingface.model_class})
        elif spec.checkpoint is None:
            progress(f"making random weights (seed {program.seed})")
            checkpoint = random_checkpoint(spec, manifest_dir, program.seed, scratch)
            spec = spec.model_copy(update={"checkpoint": str(checkpoint)})
        progress(f"exporting with ExecuTorch's LLM export ({spec.model_class or 'llama3'}, {program.backend})")
        export = export_with_backend if program.backend in PTEBUILD_LOWERED_BACKENDS else export_with_upstream
        exported = export(spec, options, program, manifest_dir, metadata, outputs)
        return _finish(program, spec, manifest_dir, display, outputs, progress, exported, started, options, metadata)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def prefill_chunk(spec: Any) -> dict[str, int]:
    """``get_max_seq_len`` where upstream's is one more than the program takes: with a dynamic
    shape the program's ``tokens`` take at most ``max_seq_length - 1`` a call (upstream's
    ``Dim(max=max_seq_length - 1)``), and ExecuTorch's runner prefills a longer prompt in chunks of
    ``get_max_seq_len`` tokens, which upstream writes as ``max_seq_length``: every prompt longer
    than the program takes failed ("Attempted to resize a bounded tensor with a maximum capacity of
    127 elements to 128"). Empty where upstream's value is right (a fixed shape)."""
    return {"get_max_seq_len": spec.max_seq_length - 1} if spec.enable_dynamic_shape else {}


def _read_huggingface(spec: Any, manifest_dir: Path, display: str, where: str) -> Any:
    from ptebuild.models.executorch_llm.huggingface import FolderProblem, read_folder

    try:
        return read_folder(manifest_dir / spec.huggingface, spec.context_length)
    except FolderProblem as exc:
        raise ManifestError(f"{spec.huggingface!r}: {exc}", manifest=display, location=f"{where}.huggingface") from None


def _scratch() -> Path:
    """A temporary folder for the weights the export reads. Its path must not hold 'int8' or
    '8da4w': ExecuTorch's loader takes a checkpoint whose path does for one quantized so."""
    while True:
        folder = Path(tempfile.mkdtemp(prefix="ptebuild-llm-"))
        if "int8" not in str(folder) and "8da4w" not in str(folder):
            return folder
        folder.rmdir()


def random_checkpoint(spec: Any, manifest_dir: Path, seed: int, scratch: Path) -> Path:
    """A state dict of ExecuTorch's model definition for ``spec``'s params, initialised on the CPU
    after ``torch.manual_seed(seed)`` (every module as its constructor makes it), saved into
    ``scratch``. The model is freed before this returns: the export loads the file (mmap)."""
    import gc

    import torch
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    params = json.loads((manifest_dir / spec.params).read_text())
    torch.manual_seed(seed)
    model = construct_transformer(ModelArgs(
        max_seq_len=spec.max_seq_length, max_context_len=spec.context_length, max_batch_size=1,
        use_kv_cache=spec.use_kv_cache, enable_dynamic_shape=spec.enable_dynamic_shape, **params,
    ))
    path = scratch / "random_weights.pth"
    torch.save(model.state_dict(), path)
    del model
    gc.collect()
    return path


def _finish(program: ProgramPlan, spec: Any, manifest_dir: Path, display: str, outputs: Outputs, progress: Progress,
            exported: Any, started: float, options: Any = None, metadata: dict[str, Any] | None = None) -> BuiltProgram:
    """Copy the tokenizer beside the program and check it; a program named wrong is searched for
    where it first diverges (:mod:`.divergence`)."""
    from ptebuild.models.executorch_llm.programs import tokenizer_output
    from ptebuild.models.executorch_llm.tokenizer import load_tokenizer

    files = dict(exported.files)
    tokenizer_name = tokenizer_output(program.name, spec.tokenizer)
    files[tokenizer_name] = outputs.copy(tokenizer_name, manifest_dir / spec.tokenizer)
    lowered_at = time.monotonic()

    figures: list[CheckFigures] = []
    warnings: list[str] = []
    check = ""
    if program.check_enabled:
        tokenizer = load_tokenizer(manifest_dir / spec.tokenizer, display, f"models.{program.model}.tokenizer")
        ptds = [files[name] for name in data_file_names(program)]
        ptd = ptds[0] if ptds else None
        if program.backend in PTEBUILD_LOWERED_BACKENDS or program.backend not in GENERATION_CHECKED_BACKENDS:
            figures, check = _backend_check(exported.model, program, files[program.pte_name], ptd, progress)
            if program.backend == "cuda":
                figures += _generation_on_the_gpu(exported, program, spec, files[program.pte_name], ptds, tokenizer, progress)
        else:
            import gc

            from ptebuild.backends import get_backend
            from ptebuild.models.executorch_llm.eager_reference import Shape
            from ptebuild.models.executorch_llm.generation import check_generation, check_in_runner

            get_backend(program.backend).ready_runtime()  # OpenVINO's: where ExecuTorch's runtime finds its library
            shape = Shape(spec.use_kv_cache, spec.enable_dynamic_shape, spec.max_seq_length, spec.context_length)
            # Each method against its own eager model (a multi-method program's: the model, or the
            # model with that method's adapter), forward last: the runner checks its continuation.
            models = exported.method_models or {"forward": exported.model}
            exported.model, exported.method_models = None, {}
            agreements = {}
            for method in sorted(models, key=lambda name: (name == "forward", name)):
                progress("checking by generation against the eager model" + (f" (method {method!r})" if len(models) > 1 else ""))
                try:
                    agreements[method] = check_generation(
                        models.pop(method), program, shape, files[program.pte_name], ptds, tokenizer,
                        exported.mutable_buffers, token_agreement_floor(program), method=method,
                    )
                except WrongProgram as wrong:  # where does it first diverge from eager PyTorch?
                    if options is None or len(models) or method != "forward":
                        raise
                    from ptebuild.models.executorch_llm.divergence import locate

                    gc.collect()  # the checked model goes before the search makes it again
                    raise locate(wrong, spec, options, program, manifest_dir, metadata or {}, files[program.pte_name], ptds,
                                 progress) from None
                gc.collect()  # the method's eager model: gone before the next is run, and before the runner loads the program
            progress("generating in ExecuTorch's TextLLMRunner")
            forward = agreements["forward"]
            runner_tokens = check_in_runner(program, files[program.pte_name], ptds, files[tokenizer_name], forward)
            generated = [figure for agreement in agreements.values() for figure in agreement.figures]
            generated[-1] = replace(generated[-1], runner_tokens=runner_tokens, runner_note=forward.note)
            figures = list(generated)
            if forward.note:
                warnings.append(forward.note)
            check = GENERATION_CHECK
    return BuiltProgram(
        files=files, delegated=exported.delegated, figures=figures, check=check,
        lower_seconds=lowered_at - started, check_seconds=time.monotonic() - lowered_at,
        insight=exported.insight, warnings=(*exported.warnings, *warnings),
    )


def _generation_on_the_gpu(exported: Any, program: ProgramPlan, spec: Any, pte: Path, ptds: list[Path], tokenizer: Any,
                           progress: Progress) -> list[GenerationFigures]:
    """A CUDA program's prefill and greedy decode through its own KV cache, its compiled code run by
    PyTorch's AOTInductor runner on the GPU (ExecuTorch's pip runtime has no CUDA backend), against
    the eager model on the GPU: the generation check's figures and token agreement (no
    TextLLMRunner: it would need ExecuTorch's CUDA runtime)."""
    import copy

    from ptebuild.backends.cuda.check import aoti_method
    from ptebuild.models.executorch_llm.eager_reference import Shape
    from ptebuild.models.executorch_llm.generation import check_generation

    progress("checking by generation on the GPU (AOTInductor runner) against the eager model")
    eager = copy.deepcopy(exported.model).to("cuda").eval()
    caches = exported.mutable_buffers or tuple(n for n, _ in eager.named_buffers() if ".kv_cache." in n)
    shape = Shape(spec.use_kv_cache, spec.enable_dynamic_shape, spec.max_seq_length, spec.context_length)
    with aoti_method(pte, ptds[0] if ptds else None, "forward", program.name) as run:
        agreement = check_generation(eager, program, shape, pte, ptds, tokenizer, caches, token_agreement_floor(program),
                                     execute=run, device="cuda", how=" (AOTInductor runner on the GPU)")
    del eager
    return agreement.figures


def _backend_check(model: Any, program: ProgramPlan, pte: Path, ptd: Path | None, progress: Progress) -> tuple[list[CheckFigures], str]:
    """A program this machine's ExecuTorch runtime cannot run, or one ptebuild's backend lowered
    (Vulkan, Core ML: structural; CUDA: on the GPU): the backend's own check of ``forward`` with
    the plan's example inputs (tokens and position), against upstream's eager model."""
    from ptebuild.backends import get_backend

    backend = get_backend(program.backend)
    progress(f"checking with the {program.backend} backend's check")

    import torch

    class Forward(torch.nn.Module):  # the eager model called as the program's forward: (tokens, input_pos)
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, tokens: Any, input_pos: Any = None) -> Any:
            return self.model(tokens) if input_pos is None else self.model(tokens, {"input_pos": input_pos})

    checked, name = backend.check(Forward().eval(), program, pte, ptd)
    return [as_figures(f) for f in checked], name
