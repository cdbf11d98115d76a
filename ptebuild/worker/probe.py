"""The probe: can this interpreter lower each backend, and run its check? Found with a real program.

``python -m ptebuild.worker.probe BACKEND...`` runs in a fresh interpreter (the builder starts it:
:mod:`ptebuild.builder.capabilities`). For each backend it prints one JSON line when it starts
(``{"backend": NAME, "step": "lower"}`` or ``"check"``) and one with the verdict::

    {"backend": "portable", "lower": null, "check": "RuntimeError: tensor does not have a device",
     "detail": "<the failure's whole text>"}

``lower``/``check`` are None when the step works, else the one-line cause (:mod:`ptebuild.causes`).
A crash (a signal from native code) leaves a started step without a verdict: the builder names it.

The program is the smallest real one: ``nn.Linear(4, 4)`` on a ``[2, 4]`` input, through the same
:func:`ptebuild.models.factory.lower.lower` and the backend's own ``check`` as every build, weights in a
``.ptd`` where the backend writes one. A backend whose ``probe_here`` answers (CUDA: a GPU, torch's
AOTInductor runner) is not lowered: its cheap facts are the verdict.
"""

from __future__ import annotations

import json
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ptebuild.backends.base import Backend
    from ptebuild.plan import ProgramPlan

PROBE_SEED = 20261201


def probe_plan(backend: Backend) -> ProgramPlan:
    """The 1-op program for ``backend`` (a :class:`~ptebuild.plan.ProgramPlan`)."""
    from ptebuild.backends import BoundBackend
    from ptebuild.plan import InputPlan, MethodPlan, ProgramPlan

    defaults = BoundBackend(backend.name, {})  # the backend's default options, validated once
    options = defaults.options.model_dump(mode="json")
    tolerances = backend.check_defaults(defaults.options)
    method = MethodPlan(name="forward", function="forward", inputs=(InputPlan("input", (2, 4), "float32"),), dims=())  # nn.Linear.forward(input)
    data_name = None if backend.keeps_data_in_pte else "probe_weights"
    return ProgramPlan(
        name="probe", model="probe", backend=backend.name, factory="probe:linear", kwargs={}, weights=None,
        seed=PROBE_SEED, sources=(), methods=(method,), data_name=data_name, options=options,
        atol=tolerances.atol, rtol=tolerances.rtol, min_cosine=tolerances.min_cosine, check_enabled=True, model_entry={},
        program_entry={}, bound=BoundBackend(backend.name, options, defaults.options),
    )


def probe_backend(name: str, emit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """The verdict for backend ``name`` (``emit(dict)`` announces each step before it runs)."""
    from ptebuild.backends import get_backend
    from ptebuild.causes import describe

    backend = get_backend(name)
    verdict: dict[str, Any] = {"backend": name, "lower": backend.can_build(None), "check": backend.can_check(None), "detail": ""}
    if verdict["lower"] is not None:
        return verdict
    answered = backend.probe_here()
    if answered is not None:
        verdict["lower"], verdict["check"] = answered
        return verdict
    import torch

    from ptebuild.lowering.examples import make_inputs
    from ptebuild.models.factory.lower import lower

    program = probe_plan(backend)
    torch.manual_seed(PROBE_SEED)
    model = torch.nn.Linear(4, 4).eval()
    with tempfile.TemporaryDirectory(prefix="ptebuild-probe-") as tmp:
        emit({"backend": name, "step": "lower"})
        try:
            lowered = lower(model, program, {"forward": make_inputs(program.methods[0], program.seed)}, Path(tmp), lambda _: None)
        except Exception as exc:
            cause = describe(exc)
            verdict.update(lower=cause.line, detail=cause.text)
            return verdict
        if verdict["check"] is not None:
            return verdict
        emit({"backend": name, "step": "check"})
        try:
            ptd = lowered.files.get(program.ptd_name) if program.ptd_name else None
            backend.check(model, program, lowered.files[program.pte_name], ptd)
        except Exception as exc:
            cause = describe(exc)
            verdict.update(check=cause.line, detail=cause.text)
    return verdict


def main(argv: list[str]) -> int:
    warnings.filterwarnings("ignore")
    import logging

    logging.disable(logging.WARNING)

    def emit(data: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(data) + "\n")
        sys.stdout.flush()

    for name in argv:
        emit(probe_backend(name, emit))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
