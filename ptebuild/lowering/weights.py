"""Count a program's weights on the exported graphs its backend lowers: quantized or float, and why.

What :mod:`ptebuild.insight.weights` holds, read from each method's ``ExportedProgram`` after the
backend's preparation (PT2E's ``convert_pt2e`` for XNNPACK's int8; torchao's ``quantize_`` for
8da4w), before partitioning, where every weight is still a graph input:

- a weight is a parameter, or a buffer or tensor constant that is not mutable state;
- **quantized**: an integer tensor that a dequantize operator reads as its input (PT2E folds the
  quantized copy of a weight into a new constant, ``_frozen_param0``: it is named after the float
  parameter it replaced, the one of its shape that nothing reads any more), its bytes with the
  scales and zero points its dequantize reads;
- **float**: a floating-point weight some operator reads directly; why it stayed float: the bias
  of an operator whose weight is quantized (by design: XNNPACK's int8 scheme keeps biases
  float), or a normalization's scale and shift (never quantized), else the operators that read
  it, which the scheme does not quantize (an RNN's
  ``aten.gru.input``, a linear an 8da4w scheme skipped);
- a parameter nothing reads (the float original of a quantized weight) is not in the program.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ptebuild.insight.weights import WeightEntry, WeightsSplit

if TYPE_CHECKING:
    from ptebuild.insight.program import ProgramInsight

_WEIGHT_KINDS = ("PARAMETER", "BUFFER", "CONSTANT_TENSOR")


def counted_weights(exported: dict[str, Any], problems: list[str]) -> WeightsSplit | None:
    """:func:`weights_split` of the graphs about to be lowered (quantized or float); None, with a
    line in ``problems``, where they cannot be counted (a program is never refused for its figures)."""
    from ptebuild.causes import describe

    try:
        return weights_split(exported)
    except Exception as exc:
        problems.append(f"its weights could not be counted: {describe(exc).line}")
        return None


def with_weights(figures: ProgramInsight, weights: WeightsSplit | None, problems: list[str]) -> ProgramInsight:
    """``figures`` with the weights; a quantized program that keeps weights float says so in ``problems``."""
    from dataclasses import replace

    if weights is None:
        return figures
    kept = weights.warning()
    if kept:
        problems.append(kept)
    return replace(figures, weights=weights)


def weights_split(exported: dict[str, Any]) -> WeightsSplit:
    """Each method's weights, from ``{method: ExportedProgram}``."""
    return WeightsSplit(tuple((method, _method_weights(ep)) for method, ep in exported.items()))


def _method_weights(ep: Any) -> tuple[WeightEntry, ...]:
    signature = ep.graph_signature
    mutated = set(getattr(signature, "buffers_to_mutate", {}).values())
    tensors = {**ep.state_dict, **getattr(ep, "constants", {})}
    nodes = {node.name: node for node in ep.graph.nodes if node.op == "placeholder"}
    weights: list[tuple[str, Any, Any]] = []  # (name, tensor, placeholder)
    for spec in signature.input_specs:
        if spec.kind.name not in _WEIGHT_KINDS or spec.target in mutated or spec.target not in tensors:
            continue
        node = nodes.get(spec.arg.name)
        if node is not None and not _written_in_place(node):
            weights.append((spec.target, tensors[spec.target], node))
    subclassed = {name for name, tensor, _ in weights if _is_subclass(tensor)}
    entries: list[WeightEntry] = [_subclass_entry(name, tensor, node) for name, tensor, node in weights if name in subclassed]
    weights = [(name, tensor, node) for name, tensor, node in weights if name not in subclassed]
    unread = [(name, tensor) for name, tensor, node in weights if not node.users and tensor.is_floating_point()]
    quantization_params: set[str] = set()
    for name, tensor, node in weights:
        dequantizing = [u for u in node.users if _is_dequantize(u) and u.args and u.args[0] is node]
        if dequantizing and not tensor.is_floating_point():
            extra = [a for u in dequantizing for a in u.args[1:] if hasattr(a, "op") and a.op == "placeholder"]
            quantization_params.update(a.name for a in extra)
            extra_bytes = sum(_bytes(tensors[t]) for t, _, n in weights if n in extra)
            original = next((i for i, (_, t) in enumerate(unread) if tuple(t.shape) == tuple(tensor.shape)), None)
            shown = unread.pop(original)[0] if original is not None else name
            readers = sorted({_op(r) for u in dequantizing for r in u.users})
            entries.append(WeightEntry(shown, _dtype(tensor), tuple(tensor.shape), _bytes(tensor) + extra_bytes, True, tuple(readers)))
    for name, tensor, node in weights:
        if node.name in quantization_params or not node.users or not tensor.is_floating_point():
            continue
        readers = [u for u in node.users if not _is_dequantize(u) and not _is_quantize(u)]
        if not readers:
            continue
        entries.append(WeightEntry(name, _dtype(tensor), tuple(tensor.shape), _bytes(tensor), False,
                                   tuple(sorted({_op(r) for r in readers})), _why_float(node, readers)))
    return tuple(entries)


def _written_in_place(node: Any) -> bool:
    """A buffer an operator writes in place (a KV cache that ExecuTorch's ``llama::update_cache``
    updates, which the export keeps as a mutation of its argument): state, not a weight."""
    for user in node.users:
        schema = getattr(getattr(user, "target", None), "_schema", None)
        if schema is None:
            continue
        for argument, value in zip(schema.arguments, user.args, strict=False):
            if value is node and argument.alias_info is not None and argument.alias_info.is_write:
                return True
    return False


def _is_subclass(tensor: Any) -> bool:
    """A tensor subclass that wraps others (torchao's quantized weights: ``IntxUnpackedToInt8Tensor``...)."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    return bool(is_traceable_wrapper_subclass(tensor))


def _subclass_entry(name: str, tensor: Any, node: Any) -> WeightEntry:
    """A torchao quantized weight, as the exported graph holds it: a subclass whose inner tensors
    (``qdata``, ``scale``, ``zero_point``) the graph reads through ``access_subclass_inner_tensor``
    and dequantizes before its operator. Its dtype is the one it is quantized to (``target_dtype``:
    ``int4`` for 8da4w); its bytes are its values at that width (two 4-bit values a byte, as the
    backend packs them) with its scales and zero points."""
    attributes, _ = tensor.__tensor_flatten__()
    inner = {attribute: getattr(tensor, attribute) for attribute in attributes}
    target = getattr(tensor, "target_dtype", None)
    dtype = str(target).removeprefix("torch.") if target is not None else _dtype(next(iter(inner.values())))
    bits = next((int(d) for d in [dtype.removeprefix("u").removeprefix("int")] if d.isdigit()), None)
    size = 0
    for attribute, value in inner.items():
        if attribute == "qdata" and bits is not None:
            size += (value.numel() * bits + 7) // 8
        else:
            size += _bytes(value)
    readers = sorted({_op(reader) for access in node.users for dequantize in access.users if _is_dequantize(dequantize)
                      for reader in dequantize.users})
    return WeightEntry(name, dtype, tuple(tensor.shape), size, True, tuple(readers))


_RECURRENT = ("aten.gru", "aten.lstm", "aten.rnn_tanh", "aten.rnn_relu")
_NORMS = ("layer_norm", "group_norm", "batch_norm", "rms_norm", "instance_norm")


def _why_float(node: Any, readers: list[Any]) -> str:
    reader = readers[0]
    if len(reader.args) > 2 and reader.args[2] is node and any(_is_dequantize(a) for a in reader.args[1:2] if hasattr(a, "op")):
        return f"the bias of a quantized {_op(reader)} (kept float by design)"
    if all(any(norm in str(r.target) for norm in _NORMS) for r in readers):
        return f"a normalization's scale or shift ({_op(reader)}: kept float by design)"
    ops = ", ".join(sorted({_op(r) for r in readers}))
    if any(rnn in str(r.target) for r in readers for rnn in _RECURRENT):
        return f"read by {ops}, a recurrent layer, for which the quantizer has no pattern"
    return f"read by {ops}, which the quantizer did not quantize here"


def _is_dequantize(node: Any) -> bool:
    return node.op == "call_function" and "dequantize" in str(node.target)


def _is_quantize(node: Any) -> bool:
    return node.op == "call_function" and "quantize" in str(node.target) and "dequantize" not in str(node.target)


def _op(node: Any) -> str:
    """``aten.gru.input``; ``aten.conv1d.default`` -> ``aten.conv1d``; a call of another kind by its kind."""
    text = str(node.target) if node.op == "call_function" else node.op
    return text.removesuffix(".default")


def _dtype(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _bytes(tensor: Any) -> int:
    return int(tensor.numel() * tensor.element_size())
