"""``ptebuild.run(manifest, program)``: run a built program on its example inputs against eager
PyTorch, and time both (:mod:`ptebuild.worker.timed_run`; imports torch and executorch); or, for a
language model's program, generate text from a prompt with ExecuTorch's own LLM runner."""

from __future__ import annotations

import os
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ptebuild.worker.timed_run import ProgramRun

DEFAULT_PROMPT = "Once upon a time"
"""What a language model's program generates from when ``run`` is given no prompt."""


def run(manifest: str | os.PathLike[str], program: str, *, method: str | None = None, iters: int = 20,
        out: str | os.PathLike[str] | None = None, prompt: str | None = None, max_new_tokens: int = 32,
        audio: str | os.PathLike[str] | None = None) -> ProgramRun | Any:
    """Load ``program``'s ``.pte`` and ``.ptd`` (checked to belong together) from the build's output
    folder (``out``, default the manifest's), run each method (or ``method``) ``iters`` times after
    a warm-up, compare with eager PyTorch; the report says whether it is within the tolerances.

    A program of a language model (an ``executorch-llm`` model) instead generates up to
    ``max_new_tokens`` tokens from ``prompt`` (default :data:`DEFAULT_PROMPT`) through ExecuTorch's
    ``TextLLMRunner`` with the tokenizer beside it, greedily, and the report (a
    :class:`~ptebuild.models.executorch_llm.runner.Generation`) gives the text and the tokens
    per second of prefill and decode. ``prompt`` for another program is a UsageError.

    A program of a model that hears (an ``executorch-multimodal`` model) generates from ``prompt``
    and the WAV file ``audio`` through ExecuTorch's ``MultimodalRunner`` (a
    :class:`~ptebuild.models.multimodal.runner.AudioGeneration`: also the encoder's speed);
    ``audio`` for another program is a UsageError.
    """
    from ptebuild.errors import UsageError
    from ptebuild.manifest import load_manifest
    from ptebuild.models import get_model_kind
    from ptebuild.worker.timed_run import find_program, run_program

    plan = load_manifest(os.fspath(manifest))
    target = find_program(plan, program)
    _runs_here(plan.manifest, target)
    kind = get_model_kind(target.kind)
    out_dir = Path(out) if out else None
    if audio is not None and not kind.hears:
        raise UsageError(f"--audio is for programs of models that hear (executorch-multimodal); {program!r} is a "
                         f"{target.kind} model's: drop --audio")
    if prompt is not None or kind.generates_text:
        if max_new_tokens < 1:
            raise UsageError(f"--max-new-tokens must be at least 1, not {max_new_tokens}; give 1 or more")
        if method is not None:
            raise UsageError(f"--method is for programs run on their example inputs; {program!r} generates text: drop --method")
        return kind.generate(plan, target, DEFAULT_PROMPT if prompt is None else prompt, max_new_tokens=max_new_tokens,
                             out_dir=out_dir, **({"audio": Path(audio)} if audio is not None else {}))
    return run_program(plan, program, method=method, iters=iters, out_dir=out_dir)


def _runs_here(manifest: str, program: Any) -> None:
    """Refuse, in one line, a program that ExecuTorch's runtime on this machine cannot run: its
    backend's check does not run it in ExecuTorch's runtime either (a CUDA program, checked with
    PyTorch's AOTInductor runner on the GPU; a Core ML or Vulkan program, checked by its structure)."""
    from ptebuild.backends import bound_backend
    from ptebuild.errors import UsageError

    bound = bound_backend(program)
    check = bound.backend.check_kind(bound.options)
    if check.numeric and check.in_executorch:
        return
    raise UsageError(
        f"{manifest}: programs.{program.name}: ExecuTorch's runtime here (its Python package) has no {program.backend} "
        f"backend, so 'ptebuild run' cannot run this program (its build checked it: {check.name}); run it on its device "
        "with a runtime built for the backend (docs/device.md)"
    )

