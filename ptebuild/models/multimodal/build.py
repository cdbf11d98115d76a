"""Build one ``executorch-multimodal`` program in a worker: tokenizer, model, export, lowering, files, check.

1. The tokenizer is read as ExecuTorch's runner reads it and held to the model's ``vocab_size``
   (the text LLM kind's :mod:`~ptebuild.models.executorch_llm.tokenizer`).
2. The eager model and its methods' exported programs come from the family's module (upstream's
   definition and export code: :mod:`.voxtral`).
3. The methods are lowered together into one program by ptebuild's backend (its partitioners for
   each method, its ``ExecutorchBackendConfig``: the weights of every method in the program's
   ``data_name`` ``.ptd``, keyed by SHA-256, each weight once), with upstream's metadata and the
   runner's (``get_max_seq_len``, ``get_max_context_len``, ``get_vocab_size``, ``use_kv_cache``,
   ``enable_dynamic_shape``, ``get_bos_id``, ``get_eos_ids``: what ``MultimodalRunner`` reads),
   the manifest's ``metadata`` over them. The KV cache's buffers are named in the program.
4. Files are streamed through the worker's outputs; the tokenizer is copied beside the program.
5. The check (:mod:`.check`), where this machine's runtime runs the backend's programs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ptebuild.errors import TOOLCHAIN, BuildError
from ptebuild.figures import CheckFigures
from ptebuild.lowering.check import WrongProgram
from ptebuild.models.base import BuiltProgram, Outputs, Progress
from ptebuild.plan import ProgramPlan

CHECK = "executorch-multimodal-generation"
"""The check's name: encoder, prefill and greedy decode against eager PyTorch, then MultimodalRunner."""


def runner_metadata(spec: Any, dims: Any, bos: int, eos: int) -> dict[str, Any]:
    """The metadata methods ExecuTorch's ``MultimodalRunner`` reads (``get_max_seq_len`` is required:
    without it the runner refuses the program), the manifest's over them."""
    return {
        "get_max_seq_len": spec.max_seq_length, "get_max_context_len": spec.max_seq_length,
        "get_vocab_size": dims.vocab_size, "use_kv_cache": True, "enable_dynamic_shape": True,
        "get_bos_id": bos, "get_eos_ids": [eos], **spec.metadata,
    }


def build_program(program: ProgramPlan, manifest_dir: Path, display: str, outputs: Outputs, progress: Progress) -> BuiltProgram:
    from ptebuild import heap
    from ptebuild.backends import get_backend
    from ptebuild.models.executorch_llm.programs import FLOAT_TOKEN_AGREEMENT, QUANTIZED_TOKEN_AGREEMENT, tokenizer_output
    from ptebuild.models.executorch_llm.tokenizer import check_fits, read_facts
    from ptebuild.models.multimodal import voxtral
    from ptebuild.models.multimodal.spec import MultimodalModelSpec

    started = time.monotonic()
    heap.return_large_frees()
    spec = MultimodalModelSpec.model_validate(program.model_entry)
    where = f"models.{program.model}"
    progress("reading the tokenizer")
    facts = read_facts(manifest_dir / spec.tokenizer, display, f"{where}.tokenizer")
    progress("making the model" + (f" (random weights, seed {program.seed})" if spec.checkpoint is None else " from its checkpoint"))
    try:
        model = voxtral.make_model(manifest_dir / spec.params, manifest_dir / spec.checkpoint if spec.checkpoint else None,
                                   program.seed, spec.max_seq_length, program.backend)
    except (KeyError, ValueError, TypeError, OSError) as exc:
        from ptebuild.causes import describe

        named = spec.params + (f" and {spec.checkpoint}" if spec.checkpoint else "")
        raise BuildError(f"ExecuTorch's Voxtral Realtime definition cannot take {named}: {describe(exc).line}; give upstream's "
                         "params.json (Mistral's layout, with multimodal.whisper_model_args)", location=where) from exc
    dims = voxtral.dims(model)
    check_fits(facts, dims.vocab_size, display, f"{where}.tokenizer", spec.params)
    backend = get_backend(program.backend)
    options = backend.program_options(program)
    # The backend's own transform of the eager model (XNNPACK's 8da4w: a copy with torchao's 4-bit
    # linears), asked through its hook; the program is exported from what it returns, and checked against it.
    eager = backend.transform_model(voxtral.methods_module(model), options, program)
    notes = backend.transform_notes(eager)
    del model
    chosen = [method.name for method in program.methods]
    progress(f"exporting {', '.join(chosen)} with ExecuTorch's Voxtral Realtime export")
    try:
        exported, metadata = voxtral.export(eager.model, spec.max_seq_length, spec.audio_frames)
    except Exception as exc:
        from ptebuild.causes import describe

        raise BuildError(f"ExecuTorch's Voxtral Realtime export failed: {describe(exc).line}; {TOOLCHAIN}",
                         location=f"programs.{program.name}") from exc
    exported = {name: exported[name] for name in chosen}  # a program of some of the methods (an encoder file)
    metadata.update(runner_metadata(spec, dims, facts.bos, facts.eos))
    progress(f"lowering {len(exported)} method{'s' if len(exported) > 1 else ''} for {program.backend}")
    written, insight, warnings = _lower(exported, metadata, program, outputs)
    del exported
    tokenizer_name = tokenizer_output(program.name, spec.tokenizer)
    files = dict(written["files"])
    files[tokenizer_name] = outputs.copy(tokenizer_name, manifest_dir / spec.tokenizer)
    lowered_at = time.monotonic()

    figures: list[CheckFigures] = []
    check = ""
    if program.check_enabled:
        from ptebuild.models.executorch_llm.programs import data_file_names
        from ptebuild.models.executorch_llm.tokenizer import load_tokenizer
        from ptebuild.models.multimodal.check import check_multimodal

        progress(f"checking {', '.join(chosen)} against the eager model"
                 + (", then in ExecuTorch's MultimodalRunner" if {"token_embedding", "text_decoder"} <= set(chosen) else ""))
        tokenizer = load_tokenizer(manifest_dir / spec.tokenizer, display, f"{where}.tokenizer")
        ptds = [files[name] for name in data_file_names(program)]
        try:
            figures = check_multimodal(eager, program, files[program.pte_name], ptds, tokenizer, files[tokenizer_name],
                                       written["mutable_buffers"] or voxtral.cache_buffers(eager), dims,
                                       min_agreement=QUANTIZED_TOKEN_AGREEMENT if _quantized(options) else FLOAT_TOKEN_AGREEMENT)
        except WrongProgram as wrong:  # where does it first diverge from eager PyTorch?
            from ptebuild.models.multimodal.divergence import locate

            raise locate(wrong, eager, spec, program, files[program.pte_name], ptds, progress) from None
        check = CHECK
    return BuiltProgram(files=files, delegated=written["delegated"], figures=figures, check=check,
                        lower_seconds=lowered_at - started, check_seconds=time.monotonic() - lowered_at,
                        insight=insight, warnings=(*notes, *warnings))


def _quantized(options: Any) -> bool:
    return getattr(options, "quantize", "none") != "none"


def _lower(exported: dict[str, Any], metadata: dict[str, Any], program: ProgramPlan, outputs: Outputs) -> tuple[dict[str, Any], Any, list[str]]:
    """The methods lowered into one program by the program's backend, written through ``outputs``."""
    import torch
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from ptebuild.backends import get_backend
    from ptebuild.causes import describe
    from ptebuild.lowering.insight import counted
    from ptebuild.lowering.weights import counted_weights, with_weights
    from ptebuild.models.executorch_llm.export import write_program

    backend = get_backend(program.backend)
    options = backend.program_options(program)
    problems: list[str] = []
    weights = counted_weights(exported, problems)  # what the backend's transform quantized, and what stayed float
    try:
        with backend.lowering_context(options), torch.no_grad():
            edge = to_edge_transform_and_lower(
                exported,
                partitioner={name: backend.partitioners(options, program) for name in exported},
                compile_config=EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=True),
                constant_methods=metadata,
            )
            insight = counted(edge, program, problems)
            if insight is not None:
                insight = with_weights(insight, weights, problems)
            emit = backend.emit_config(program.data_name, options)
            executorch_program = edge.to_executorch(emit)
            if program.data_name is not None:  # the delegate's weights too, where its runtime finds them in a .ptd
                backend.place_weights(executorch_program, emit, program.data_name)
    except BuildError:
        raise
    except Exception as exc:
        raise BuildError(f"lowering the Voxtral Realtime methods for {program.backend} failed: {describe(exc).line}; {TOOLCHAIN}",
                         location=f"programs.{program.name}") from exc
    del edge
    written = write_program(executorch_program, program, outputs, config=emit)
    return written, insight.worker_part() if insight is not None else None, problems
