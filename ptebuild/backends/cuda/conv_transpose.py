"""Transposed convolutions for ExecuTorch 1.5.1's CUDA backend, as the convolutions they equal.

The limit: ExecuTorch's CUDA lowering lets Inductor choose only Triton kernels for convolutions
(``max_autotune_conv_backends = "TRITON"``: an ATen convolution would call ``aoti_torch_cuda_
convolution``, a C shim its CUDA runtime does not define), and Inductor's Triton convolution
templates take no transposed convolution, so a ``ConvTranspose1d``/``2d`` fails to lower:
"NoValidChoicesError: No choices to select ... please consider adding ATEN into
max_autotune_conv_backends" (seen on the H200, torch 2.11). Adding ATen there is not a fix for
ExecuTorch 1.5.1: the program would lower and then call a shim the device's runtime lacks.
Upstream lowers transposed convolutions (1-D, 2-D, no dilation) in pytorch/executorch#24222, for
1.6.

The fix ptebuild applies (:func:`rewrite`): before lowering, each transposed convolution of 1 or 2
spatial dims without dilation is replaced by the ordinary convolution it equals, which the Triton
templates take: the input interleaved with ``stride - 1`` zeros along each spatial dim, padded by
``kernel - 1 - padding`` before and ``kernel - 1 - padding + output_padding`` after (cropped where
that is negative), convolved with stride 1 by the weight flipped along its spatial dims with its
input and output channels swapped per group. The same sums in another order: float32 results
agree to rounding. A 1-D one becomes a 2-D one of height 1 (Inductor's templates are 2-D). A
transposed convolution with dilation, or of 3 spatial dims, is left as it is (and fails to lower,
explained by :mod:`ptebuild.lowering.known_limits`).

The fix is named in every CUDA program's key and build record (the toolchain fact
``cuda.fixes``, :data:`FIX`). Runs in a worker: imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

FIX = "conv-transpose-as-conv: transposed convolutions (1-D, 2-D, no dilation) lowered as convolutions (until pytorch/executorch#24222)"
"""How the fix is named in the key and the record (bump the text if the rewrite changes)."""


def _interleave(x: Any, stride: list[int]) -> Any:
    """``x`` ([N, C, H, W]) with ``stride - 1`` zeros after each element along H and W, the last
    element's zeros dropped: [N, C, (H - 1) * sh + 1, (W - 1) * sw + 1]."""
    import torch.nn.functional as F

    n, c, h, w = x.shape
    sh, sw = stride
    if sh == 1 and sw == 1:
        return x
    spread = F.pad(x.reshape(n, c, h, 1, w, 1), (0, sw - 1, 0, 0, 0, sh - 1))
    spread = spread.reshape(n, c, h * sh, w * sw)
    return spread[:, :, : (h - 1) * sh + 1, : (w - 1) * sw + 1]


def _pad_or_crop(x: Any, before: list[int], after: list[int]) -> Any:
    """``x`` padded with zeros (or cropped, where negative) along H and W."""
    import torch.nn.functional as F

    (top, left), (bottom, right) = before, after
    x = x[:, :, max(0, -top): x.shape[2] - max(0, -bottom), max(0, -left): x.shape[3] - max(0, -right)]
    return F.pad(x, (max(0, left), max(0, right), max(0, top), max(0, bottom)))


def conv_transpose_as_conv(x: Any, weight: Any, bias: Any, stride: list[int], padding: list[int],
                           output_padding: list[int], groups: int) -> Any:
    """``conv_transpose{1,2}d(x, weight, bias, stride, padding, output_padding, groups)`` (dilation
    1) computed as a 2-D convolution (see the module docstring)."""
    import torch
    import torch.nn.functional as F

    unbatched = x.dim() == weight.dim() - 1  # [C, L] or [C, H, W]
    if unbatched:
        x = x.unsqueeze(0)
    one_d = weight.dim() == 3
    if one_d:
        x, weight = x.unsqueeze(2), weight.unsqueeze(2)
        stride, padding, output_padding = [1, stride[0]], [0, padding[0]], [0, output_padding[0]]
    kernel = list(weight.shape[2:])
    c_in, c_out_per_group = weight.shape[0], weight.shape[1]
    flipped = torch.flip(weight, dims=[2, 3])
    flipped = flipped.reshape(groups, c_in // groups, c_out_per_group, *kernel).transpose(1, 2)
    flipped = flipped.reshape(groups * c_out_per_group, c_in // groups, *kernel)
    spread = _interleave(x, stride)
    before = [k - 1 - p for k, p in zip(kernel, padding)]
    after = [k - 1 - p + o for k, p, o in zip(kernel, padding, output_padding)]
    out = F.conv2d(_pad_or_crop(spread, before, after), flipped, bias, stride=1, padding=0, groups=groups)
    out = out.squeeze(2) if one_d else out
    return out.squeeze(0) if unbatched else out


def _expand(value: Any, dims: int) -> list[int]:
    items = list(value) if isinstance(value, list | tuple) else [value]
    return items * dims if len(items) == 1 else items


def _as_conv_transpose1d(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
                         output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Any:
    return conv_transpose_as_conv(x, weight, bias, _expand(stride, 1), _expand(padding, 1), _expand(output_padding, 1), groups)


def _as_conv_transpose2d(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
                         output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Any:
    return conv_transpose_as_conv(x, weight, bias, _expand(stride, 2), _expand(padding, 2), _expand(output_padding, 2), groups)


def _as_convolution(x: Any, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any, transposed: bool,
                    output_padding: Any, groups: int) -> Any:
    dims = weight.dim() - 2
    return conv_transpose_as_conv(x, weight, bias, _expand(stride, dims), _expand(padding, dims),
                                  _expand(output_padding, dims), groups)


def _replacement(node: Any) -> Callable[..., Any] | None:
    """The function that computes ``node`` as a convolution, or None where the fix does not apply."""
    import torch

    aten = torch.ops.aten
    arguments = dict(zip(("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"), node.args))
    arguments.update(node.kwargs)
    function: Callable[..., Any]
    if node.target in (aten.conv_transpose1d.default, aten.conv_transpose2d.input):
        spatial = 1 if node.target is aten.conv_transpose1d.default else 2
        function = _as_conv_transpose1d if spatial == 1 else _as_conv_transpose2d
        dilation = arguments.get("dilation", 1)
    elif node.target is aten.convolution.default and len(node.args) > 6 and node.args[6]:
        weight = node.args[1]
        value = weight.meta.get("val") if hasattr(weight, "meta") else None
        spatial = value.dim() - 2 if value is not None else 0
        function, dilation = _as_convolution, node.args[5]
    else:
        return None
    if spatial not in (1, 2) or any(d != 1 for d in _expand(dilation, spatial)):
        return None
    return function


def rewrite(module: Any) -> int:
    """Replace, in the unlifted graph ``module`` (``ExportedProgram.module()``), every transposed
    convolution the fix applies to by a call that computes it as a convolution; return how many.
    Export the module again to trace the calls into the graph."""
    count = 0
    for graph_module in module.modules():
        if not hasattr(graph_module, "graph"):
            continue
        for node in graph_module.graph.nodes:
            if node.op != "call_function":
                continue
            function = _replacement(node)
            if function is not None:
                node.target = function
                count += 1
        if count:
            graph_module.recompile()
    return count
