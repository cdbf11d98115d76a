"""Where a multimodal program named wrong first diverges: the method its check failed in (the
encoder, the text decoder), then the operator.

The method is exported again from the eager model the check compared with (upstream's export,
after the backend's transform) and searched operator by operator on the failing inputs by
:func:`ptebuild.lowering.divergence.operator_divergence` (the encoder: the check's mel spectrogram;
the text decoder: one call from an empty KV cache with the prompt's and the audio's eager
embeddings). Where every operator of the method lowered again agrees with PyTorch, the program as
built is run on the same inputs: if it is still far from the eager model, the program is not this
model lowered now (other weights, an older build of other code), and the line says so rather than
blaming an operator. A best effort: the program is named wrong whether or not the place is found.

Runs in a worker.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ptebuild.lowering.check import WrongProgram
from ptebuild.plan import ProgramPlan


def locate(wrong: WrongProgram, eager: Any, spec: Any, program: ProgramPlan, pte: Path, ptds: list[Path],
           progress: Callable[[str], None]) -> WrongProgram:
    """``wrong`` with where the program first diverges added to its line, every operator's figures
    in a note (the program's log)."""
    from ptebuild.backends import get_backend
    from ptebuild.causes import describe
    from ptebuild.lowering.divergence import NOT_THIS_MODEL, Divergence, built_program_far, located, operator_divergence
    from ptebuild.models.multimodal import voxtral
    from ptebuild.models.multimodal.check import zero_state

    if not wrong.inputs or wrong.method not in voxtral.METHODS:
        return wrong
    progress(f"looking for where {wrong.method} first diverges from eager PyTorch")
    backend = get_backend(program.backend)
    options = backend.program_options(program)
    note = ""
    try:
        zero_state(eager, voxtral.cache_buffers(eager))
        exported, _ = voxtral.export(eager.model, spec.max_seq_length, spec.audio_frames)
        found = operator_divergence(exported[wrong.method], wrong.inputs, backend, options, program, program.check_settings())
        if found.rows and not any(row.wrong for row in found.rows):
            import torch

            zero_state(eager, voxtral.cache_buffers(eager))
            with torch.no_grad():
                expected = getattr(eager, wrong.method)(*wrong.inputs)
            cosine = built_program_far(pte, ptds, wrong.method, wrong.inputs, expected, program.check_settings())
            if cosine is not None:
                found = Divergence(NOT_THIS_MODEL.format(method=wrong.method, cosine=cosine), found.rows)
        note = found.table() if found.rows else ""
    except Exception as exc:  # a best effort: the program is named wrong either way
        found = Divergence(f"where it first diverges could not be found ({describe(exc).line})")
        note = describe(exc).text
    return located(wrong, found, note, program.name)
