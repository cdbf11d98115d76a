"""A method's memory facts that only the exported program knows (:mod:`ptebuild.insight.memory`).

Runs in the worker on each method's lowered edge program (``edge.exported_program(method)``, its
graph functionalized, with its symbolic shapes): the buffers the method mutates in place (in the
top graph, or inside a delegate that took the update), and its outputs' bytes at each of
:func:`~ptebuild.insight.memory.io_points`, from the outputs' symbolic shapes. A dynamic dim is
found as the symbol of an input axis that the manifest names; an output whose shape holds a
symbol of no such axis (a data-dependent size) has no figure (None).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ptebuild.insight.memory import IoPoint, MethodMemory, TensorBytes, input_bytes, io_points, tensor_bytes
from ptebuild.plan import MethodPlan


def method_memory(exported: Any, method: MethodPlan) -> MethodMemory:
    """The mutable buffers and the inputs' and outputs' bytes of ``method``, from its lowered edge
    program ``exported`` (planned memory is the ``.pte``'s, added from the file)."""
    symbols = _dim_symbols(exported, method)
    outputs = _output_shapes(exported)
    points = []
    for at, sizes in io_points(method):
        values = {symbol: dict(sizes)[dim] for symbol, dim in symbols.items()}
        points.append(IoPoint(at, sizes, input_bytes(method, dict(sizes)), _bytes_at(outputs, values)))
    return MethodMemory(method.name, (), mutable_buffers(exported), tuple(points))


def mutable_buffers(exported: Any) -> tuple[TensorBytes, ...]:
    """The buffers a functionalized exported program updates in place, and those its lowered
    modules update (a delegate that took the update), sorted by name."""
    found: dict[str, TensorBytes] = {}
    programs = [exported]
    for node in exported.graph.nodes:
        if node.op == "get_attr":
            inner = getattr(getattr(exported.graph_module, str(node.target), None), "original_module", None)
            if inner is not None and hasattr(inner, "graph_signature"):
                programs.append(inner)
    for program in programs:
        signature = program.graph_signature
        mutated = set(signature.buffers_to_mutate.values())
        placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
        for placeholder, name in signature.inputs_to_buffers.items():
            node = placeholders.get(placeholder)
            value = node.meta.get("val") if node is not None else None
            if name not in mutated or value is None or not hasattr(value, "shape") or name in found:
                continue
            shape = tuple(int(n) for n in value.shape)
            dtype = str(value.dtype).removeprefix("torch.")
            found[name] = TensorBytes(name, dtype, shape, tensor_bytes(dtype, shape) or 0)
    return tuple(found[name] for name in sorted(found))


def _dim_symbols(exported: Any, method: MethodPlan) -> dict[Any, str]:
    """Symbol -> dim name, from the axes of the user inputs that the manifest names by a dim."""
    user = [node for node in exported.graph.nodes if node.op == "placeholder" and node.name in set(exported.graph_signature.user_inputs)]
    tensors = [leaf for leaf in method.leaves() if leaf.kind == "tensor"]
    values = [node.meta.get("val") for node in user if hasattr(node.meta.get("val"), "shape")]
    found: dict[Any, str] = {}
    if len(values) != len(tensors):
        return found
    for leaf, value in zip(tensors, values):
        for axis, dim in enumerate(leaf.shape):
            if isinstance(dim, str) and axis < len(value.shape):
                expr = _expr(value.shape[axis])
                if expr is not None and getattr(expr, "is_Symbol", False):
                    found[expr] = dim
    return found


def _output_shapes(exported: Any) -> list[tuple[str, tuple[Any, ...]]]:
    """``(dtype, shape)`` of each user output tensor (a shape entry is an int or a sympy expression)."""
    from torch.export.graph_signature import OutputKind

    output = next(node for node in exported.graph.nodes if node.op == "output")
    shapes = []
    for spec, arg in zip(exported.graph_signature.output_specs, output.args[0]):
        if spec.kind != OutputKind.USER_OUTPUT:
            continue
        value = arg.meta.get("val") if hasattr(arg, "meta") else None
        if value is None or not hasattr(value, "shape"):
            continue
        dims = tuple(_expr(n) if not isinstance(n, int) else n for n in value.shape)
        shapes.append((str(value.dtype).removeprefix("torch."), dims))
    return shapes


def _expr(size: Any) -> Any:
    node = getattr(size, "node", None)
    return getattr(node, "expr", None) if node is not None else None


def _bytes_at(outputs: list[tuple[str, tuple[Any, ...]]], values: Mapping[Any, int]) -> int | None:
    total = 0
    for dtype, dims in outputs:
        shape = []
        for dim in dims:
            if isinstance(dim, int):
                shape.append(dim)
                continue
            if dim is None:
                return None
            value = dim.subs(values) if values else dim
            if not getattr(value, "is_number", False):
                return None
            shape.append(int(value))
        size = tensor_bytes(dtype, shape)
        if size is None:
            return None
        total += size
    return total
