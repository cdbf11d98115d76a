"""Where a language model's program named wrong first diverges from eager PyTorch: the operator.

The check (:mod:`.generation`) names the method and the inputs of its first call from an empty
KV cache (the prompt, as the program took it). The model is prepared and exported again by
upstream's LLM export up to its exported program (``_prepare_for_llama_export``, its source
transforms and quantization included: the model the build lowered), and searched operator by
operator on those inputs by :func:`ptebuild.lowering.divergence.operator_divergence`, lowered with
ptebuild's backend of the program (its partitioners: the same operators delegated as upstream's
LLM export delegates, for XNNPACK and portable). Where every operator agrees with PyTorch, the
program as built is run on the same inputs: if it is still far from the eager model, it is not
this model lowered now (other weights, a build of other code), and the line says so. A best
effort: the program is named wrong whether or not the place is found.

Runs in a worker.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ptebuild.lowering.check import WrongProgram
from ptebuild.plan import ProgramPlan


def locate(wrong: WrongProgram, spec: Any, options: Any, program: ProgramPlan, manifest_dir: Path, metadata: dict[str, Any],
           pte: Path, ptds: list[Path], progress: Callable[[str], None]) -> WrongProgram:
    """``wrong`` with where the program first diverges added to its line, every operator's figures
    in a note (the program's log)."""
    from ptebuild.backends import get_backend
    from ptebuild.causes import describe
    from ptebuild.lowering.divergence import NOT_THIS_MODEL, Divergence, built_program_far, located, operator_divergence
    from ptebuild.models.executorch_llm.spec import backend_options

    if not wrong.inputs or program.backend not in ("portable", "xnnpack"):
        return wrong
    progress(f"looking for where {wrong.method or 'forward'} first diverges from eager PyTorch")
    note = ""
    try:
        backend = get_backend(program.backend)
        own = backend.options_model.model_validate(backend_options(program.backend, options))
        model, exported = _exported_again(spec, options, program, manifest_dir, metadata)
        # The exported forward takes (tokens, {"input_pos": ...}) with a KV cache; the program, both flat.
        structured = wrong.inputs if len(wrong.inputs) == 1 else (wrong.inputs[0], {"input_pos": wrong.inputs[1]})
        found = operator_divergence(exported, structured, backend, own, program, program.check_settings())
        if found.rows and not any(row.wrong for row in found.rows):
            expected = _eager_call(model, wrong.inputs)
            cosine = built_program_far(pte, ptds, wrong.method or "forward", wrong.inputs, expected, program.check_settings())
            if cosine is not None:
                found = Divergence(NOT_THIS_MODEL.format(method=wrong.method or "forward", cosine=cosine), found.rows)
        note = found.table() if found.rows else ""
    except Exception as exc:  # a best effort: the program is named wrong either way
        found = Divergence(f"where it first diverges could not be found ({describe(exc).line})")
        note = describe(exc).text
    return located(wrong, found, note, program.name)


def _exported_again(spec: Any, options: Any, program: ProgramPlan, manifest_dir: Path, metadata: dict[str, Any]) -> tuple[Any, Any]:
    """Upstream's prepared model (after its source transforms) and its exported program, as
    :func:`~ptebuild.models.executorch_llm.export.export_with_backend` takes them."""
    from executorch.examples.models.llama import export_llama_lib

    from ptebuild.models.executorch_llm.export import llm_config, prepared_quietly

    config = llm_config(spec, options, program, manifest_dir, metadata, None)
    with prepared_quietly(metadata):
        manager = export_llama_lib._prepare_for_llama_export(config)
        manager.export()
        exported = manager._export(manager.pre_autograd_graph_module)
    return manager.model, exported


def _eager_call(model: Any, inputs: tuple[Any, ...]) -> Any:
    """The eager model called as the program's ``forward`` (tokens, and the position with a KV
    cache), from an empty cache."""
    import torch

    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if "cache" in name:
                buffer.zero_()
        out = model(inputs[0]) if len(inputs) == 1 else model(inputs[0], {"input_pos": inputs[1]})
    return out[0] if isinstance(out, (list, tuple)) else out
