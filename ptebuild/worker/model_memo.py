"""What a worker process keeps between its tasks: the last model it built and its exported methods.

Several programs of one model (a backend each) that run in one worker process (the local pool's,
a Ray worker's) build the model once and export each method once, as a hand-written script
would, and each lowers from the same exported program. What is kept is used only while it is
provably the same model in the same state:

- its identity: the model's manifest entry, the digests of its sources and weights as the task's
  key names them, and the manifest's folder (:func:`identity`);
- its tensors: a fingerprint of every parameter and buffer (their names, dtypes, shapes and
  bytes, xxh3-128, nothing copied), taken when it was built and taken again before it is used: a
  task whose eager check changed the model's state in place (a cache written by its forward) leaves
  a model that the next program is not lowered from;
- the user modules it was imported from, which stay loaded while it is kept (the next task's
  discovered dependencies are those of the model it uses), and torch's random state after it was
  built, put back.

A task of another model drops what is kept before it builds its own: one model in memory at a
time. A child of the warm server is forked from a process that never built a model, and keeps
nothing. Exported programs are lowered, never changed: a backend that rewrites one exports again
(:meth:`ptebuild.backends.base.Backend.prepare`).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ptebuild.worker.tasks import Task


def identity(task: Task) -> str | None:
    """What makes two tasks' models the same model: its manifest entry, its files' digests, where;
    None for a task that does not name its files' digests (nothing is kept for it)."""
    from ptebuild import keyinputs
    from ptebuild.canonical import canonical_json

    program = task.plan
    files = keyinputs.of_kind(task.inputs, keyinputs.InputKind.SOURCE, keyinputs.InputKind.WEIGHTS)
    if not files:
        return None
    return canonical_json({"manifest_dir": task.manifest_dir, "model": program.model_entry, "factory": program.factory,
                           "kwargs": program.kwargs, "seed": program.seed, "weights": program.weights, "files": files})


def fingerprint(model: Any) -> str:
    """xxh3-128 of every parameter's and buffer's name, dtype, shape and bytes (read in place)."""
    import torch
    import xxhash

    digest = xxhash.xxh3_128()
    tensors = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    for name, tensor in tensors:
        data = tensor.detach()
        digest.update(f"{name}\0{data.dtype}\0{tuple(data.shape)}\0".encode())
        if data.device.type != "cpu" or not data.is_contiguous():
            data = data.to("cpu").contiguous()  # a copy of this tensor alone
        if data.numel():
            digest.update(memoryview(data.reshape(-1).view(torch.uint8).numpy()))
    return digest.hexdigest()


@dataclass
class Kept:
    identity: str | None
    model: Any
    fingerprint: str
    rng: Any
    """torch's random state right after the model was built."""
    modules: frozenset[str] = frozenset()
    """The user modules loaded at the end of the last task that used it."""
    exports: dict[Any, Any] = field(default_factory=dict)
    """A method's export key (:func:`ptebuild.models.factory.lower.export_key`) -> its exported program."""


_kept: Kept | None = None


def take(task: Task) -> Kept | None:
    """The kept model for ``task``, if it is its model in the state it was built in; else None,
    and whatever was kept is dropped (before the task builds its own)."""
    global _kept
    kept, _kept = _kept, None
    wanted = identity(task)
    if kept is not None and wanted is not None and kept.identity == wanted and fingerprint(kept.model) == kept.fingerprint:
        _kept = kept
        return kept
    if kept is not None:
        del kept
        gc.collect()  # an exported program's graph holds cycles: free the model now, not later
    return None


def keep(task: Task, model: Any) -> Kept:
    """Keep ``model``, just built for ``task``."""
    global _kept
    import torch

    _kept = Kept(identity(task), model, fingerprint(model), torch.get_rng_state())
    return _kept


def restore_random_state(kept: Kept) -> None:
    import torch

    torch.set_rng_state(kept.rng)


def kept_modules() -> frozenset[str]:
    """The user modules the kept model needs loaded (none when nothing is kept)."""
    return _kept.modules if _kept is not None else frozenset()


def note_modules(modules: frozenset[str]) -> None:
    """After a task: the user modules loaded now, which the kept model was used with."""
    if _kept is not None:
        _kept.modules = modules


def drop() -> None:
    """Keep nothing (a task failed: its model may be half-changed)."""
    global _kept
    _kept = None
