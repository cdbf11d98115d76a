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

from typing import Any

from ptebuild.insight.weights import WeightEntry, WeightsSplit

_WEIGHT_KINDS = ("PARAMETER", "BUFFER", "CONSTANT_TENSOR")


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
        if node is not None:
            weights.append((spec.target, tensors[spec.target], node))
    unread = [(name, tensor) for name, tensor, node in weights if not node.users and tensor.is_floating_point()]
    quantization_params: set[str] = set()
    entries: list[WeightEntry] = []
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
