"""Which ``nn.Linear`` layers hand their weight to code other than their own forward.

torchao's ``quantize_`` (the ``8da4w`` scheme) swaps a linear's weight for a quantized tensor
that implements what ``Linear.forward`` does with it (``F.linear``), and little else. Code that
takes the weight elsewhere then fails when the model is exported: ``nn.MultiheadAttention``
passes ``out_proj.weight`` to ``F.multi_head_attention_forward``, which transposes it (``aten.t``
is not one of torchao's operators); a model may read an embedding's table from an output layer's
weight. Such a model is right, and its other linears can be 4-bit: those layers stay float.

:func:`linears_used_elsewhere` finds them by calling the model once (``probe``: each method on
its example inputs) under a ``TorchFunctionMode`` that sees every torch function a linear's
weight is passed to, and forward hooks that say which linears' forwards are running. A weight
passed to a function while none of the linears holding it is in its forward is used elsewhere.
Reading its shape, dtype or size is not a use. The model's buffers are restored after the
call, and the hooks removed.

Runs in a worker: imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

HARMLESS = frozenset({"__get__", "size", "dim", "numel", "__len__", "is_floating_point", "element_size"})
"""Functions that only read what a quantized weight also answers (its shape, dtype, size)."""


def _name(func: Any) -> str:
    module = getattr(func, "__module__", None) or ""
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    return f"{module}.{name}" if module and not name.startswith(module) else str(name)


def linears_used_elsewhere(model: Any, probe: Callable[[Any], Any]) -> dict[str, str]:
    """``{linear's name: the first function that took its weight outside its forward}`` over one
    ``probe(model)`` (in ``torch.no_grad``), in the model's module order."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_leaves

    from ptebuild.lowering.state import restore_buffers, saved_buffers

    linears = {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    holders: dict[int, set[str]] = {}
    for name, linear in linears.items():
        holders.setdefault(id(linear.weight), set()).add(name)
    running: list[str] = []
    found: dict[str, str] = {}

    class Watch(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if getattr(func, "__name__", "") not in HARMLESS:
                for leaf in tree_leaves((args, kwargs)):
                    names = holders.get(id(leaf)) if isinstance(leaf, torch.Tensor) else None
                    if names and not names.intersection(running):
                        for name in names:
                            found.setdefault(name, _name(func))
            return func(*args, **kwargs)

    def enter(name: str) -> Callable[..., None]:
        return lambda module, inputs: running.append(name)

    def leave(name: str) -> Callable[..., None]:
        def hook(module: Any, inputs: Any, output: Any) -> None:
            running.remove(name)
        return hook

    saved = saved_buffers(model)
    handles = []
    try:
        for name, linear in linears.items():
            handles.append(linear.register_forward_pre_hook(enter(name)))
            handles.append(linear.register_forward_hook(leave(name)))
        with torch.no_grad(), Watch():
            probe(model)
    finally:
        for handle in handles:
            handle.remove()
        restore_buffers(model, saved)
    return {name: found[name] for name in linears if name in found}


def example_probe(program: Any) -> Callable[[Any], None]:
    """A probe that calls each method of ``program`` (a :class:`~ptebuild.plan.ProgramPlan`) on
    its example inputs, as the export does."""

    def probe(model: Any) -> None:
        from ptebuild.lowering.binding import call_method
        from ptebuild.lowering.examples import make_inputs

        for method in program.methods:
            call_method(model, method, make_inputs(method, program.seed), program.model)

    return probe
