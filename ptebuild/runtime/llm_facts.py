"""What an LLM runner reads from a ``.pte`` besides its ``forward``: metadata values and mutable buffers.

Pure Python (the reader of :mod:`.pte_file`); imports neither torch nor executorch.

**Metadata methods.** ExecuTorch's LLM export writes each metadata entry (``get_max_seq_len``,
``get_vocab_size``, ``get_eos_ids``, ``use_kv_cache``...) as a method of its own that returns a
constant (``to_edge(constant_methods=...)``): a plan with no inputs and no instructions whose one
output is an ``Int``, ``Bool``, ``Double`` or ``String`` value, or an ``IntList`` whose items
are the indexes of ``Int`` values of the same plan (ExecuTorch boxes a list's ints so). A list
of several items (``get_eos_ids`` of a model with two or three EOS ids) is returned flattened:
one such output per item, read as a list (a list of one item is its item: the runner reads both
alike). The runner calls it; :func:`constant_value` reads the value it returns from the plan.

**Mutable buffers** (a KV cache): ExecuTorch's emitter gives every placeholder of a method's
graph one value, in order, before any other value, so the values before the method's first input
are its parameters, buffers and constants. Of these, a mutated buffer is a tensor that is memory
planned (``allocation_info``) and holds no data (``data_buffer_idx`` 0, not external): its bytes
are planned memory that persists between calls. Its name is in ``extra_tensor_info`` when the
program was emitted with ``emit_mutable_buffer_names`` (ptebuild's LLM programs are), else unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptebuild.runtime.pte_file import ExecutionPlan, TensorDataLocation, Value, open_pte

_SCALARS = ("Int", "Bool", "Double", "String")


@dataclass(frozen=True)
class MutableBuffer:
    """A tensor a method keeps between calls (a KV cache): its name if the program records it,
    dtype code (executorch ``ScalarType``), sizes and value index."""

    name: str | None
    scalar_type: int
    sizes: tuple[int, ...]
    value: int


def constant_value(plan: ExecutionPlan, values: list[Value] | None = None) -> tuple[bool, Any]:
    """``(True, value)`` if ``plan`` is a method that only returns a constant (a metadata method),
    else ``(False, None)``. Bools come back as bools, lists of ints as lists."""
    if plan.inputs() or any(chain.instructions for chain in plan.chains()):
        return False, None
    outputs = plan.outputs()
    values = values if values is not None else plan.values()
    if not outputs or not all(0 <= index < len(values) for index in outputs):
        return False, None
    if len(outputs) > 1:  # a returned list is flattened: one constant output per item
        items = [values[index] for index in outputs]
        kinds = {item.kind for item in items}
        if len(kinds) == 1 and kinds <= set(_SCALARS) and all(item.present for item in items):
            return True, [_scalar(item) for item in items]
        return False, None
    value = values[outputs[0]]
    if value.kind in _SCALARS and value.present:
        return True, _scalar(value)
    if value.kind == "IntList" and value.items is not None:
        boxed = [values[int(i)] if 0 <= int(i) < len(values) else None for i in value.items]
        if all(v is not None and v.kind == "Int" for v in boxed):
            return True, [v.scalar for v in boxed if v is not None]
    if value.kind in ("BoolList", "DoubleList") and value.items is not None:
        return True, [bool(i) for i in value.items] if value.kind == "BoolList" else list(value.items)
    return False, None


def _scalar(value: Value) -> Any:
    """A present scalar value as Python has it (a ``Bool``'s as a bool)."""
    return bool(value.scalar) if value.kind == "Bool" else value.scalar


def mutable_buffers(plan: ExecutionPlan, values: list[Value] | None = None) -> tuple[MutableBuffer, ...]:
    """The method's mutable buffers (module docstring), in value order."""
    inputs = plan.inputs()
    if not inputs:
        return ()
    values = values if values is not None else plan.values()
    found = []
    for index, value in enumerate(values[: min(inputs)]):
        tensor = value.tensor
        if tensor is None or tensor.allocation is None or tensor.data_buffer_idx != 0:
            continue
        extra = tensor.extra
        if extra is not None and extra.location == TensorDataLocation.EXTERNAL:
            continue
        name = extra.fully_qualified_name if extra is not None else None
        found.append(MutableBuffer(name, tensor.scalar_type, tensor.sizes, index))
    return tuple(found)


def metadata_values(path: str | Path) -> dict[str, Any]:
    """The value each metadata method of the ``.pte`` at ``path`` returns, by method name."""
    found = {}
    with open_pte(path) as pte:
        for plan in pte.execution_plans():
            constant, value = constant_value(plan)
            if constant:
                found[plan.name()] = value
    return found
