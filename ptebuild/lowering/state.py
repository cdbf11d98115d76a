"""A model's state: the buffers a call may update in place (a counter, a running mean, a cache).

Several steps call a model before the program is made or checked, and must leave its state as it
was: the check's first eager call (:mod:`.check`), 8da4w's probe of the linears
(:mod:`ptebuild.backends.xnnpack.linear_use`), PT2E's calibration and conversion
(:mod:`ptebuild.backends.xnnpack`), and the structural checks asking whether a model has state.
:func:`saved_buffers` copies buffers, :func:`restore_buffers`
writes them back in place, :func:`versions` gives the version counters an in-place update bumps.
:func:`updated_buffers` names what a call of the methods updates, and :func:`with_state` restates
a failed check of such a model with it, for the known limit of a toolchain that mishandles state
to match.

Runs in a worker: imports torch.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ptebuild.errors import REPORT, CheckError
from ptebuild.plan import ProgramPlan


def versions(model: Any) -> dict[str, int]:
    """The version counters of the model's buffers and parameters: an in-place update bumps them."""
    import torch

    found = {}
    if isinstance(model, torch.nn.Module):
        for name, tensor in [*model.named_buffers(), *model.named_parameters()]:
            found[name] = tensor._version
    return found


def saved_buffers(model: Any, names: Collection[str] | None = None) -> dict[str, Any]:
    """A copy of the model's buffers (those in ``names``, if given); none for what is no module."""
    import torch

    if not isinstance(model, torch.nn.Module):
        return {}
    return {name: b.detach().clone() for name, b in model.named_buffers() if names is None or name in names}


def restore_buffers(model: Any, saved: dict[str, Any]) -> None:
    """Write the ``saved`` values back into the model's buffers of those names, in place."""
    import torch

    with torch.no_grad():
        for name, b in model.named_buffers():
            if name in saved:
                b.copy_(saved[name])


def updated_buffers(model: Any, program: ProgramPlan) -> list[str]:
    """The buffers of ``model`` that a call of each method on its example inputs updates in place
    (a state: a counter, a cache), restored afterwards; for the message of a structural mismatch
    that a delegate's handling of state explains."""
    import torch

    from ptebuild.lowering.binding import call_method
    from ptebuild.lowering.examples import make_inputs

    if not isinstance(model, torch.nn.Module):
        return []
    buffers = dict(model.named_buffers())
    before = {name: b._version for name, b in buffers.items()}
    saved = saved_buffers(model)
    changed: list[str] = []
    try:
        with torch.no_grad():
            for method in program.methods:
                call_method(model, method, make_inputs(method, program.seed), program.model)
        changed = [name for name, b in buffers.items() if b._version != before[name]]
    except Exception:  # the model's own code: the mismatch stands as it was
        return []
    finally:
        restore_buffers(model, saved)
    return changed


def with_state(error: CheckError, model: Any, program: ProgramPlan, after: str = "") -> CheckError | None:
    """``error`` restated with the buffers ``model`` updates in place (``...; the model updates
    buffers in place (calls)`` and ``after``), its "bug in ptebuild" clause dropped: a known limit
    matches the words and says whose it is and what to do. None for a model without state."""
    state = updated_buffers(model, program)
    if not state:
        return None
    said = error.message.removesuffix(f"; {REPORT}")
    return CheckError(f"{said}; the model updates buffers in place ({', '.join(state)}){after}",
                      manifest=error.manifest, location=error.location)
