"""The eager reference's quantized linear layers, computed a block of output rows at a time.

ExecuTorch's LLM export quantizes a model's linear layers with torchao (``8da4w``, ``8da8w``,
``4w``): each weight becomes an ``IntxUnpackedToInt8Tensor`` whose eager ``linear`` dequantizes
the whole weight into a new float tensor on every call (three transient copies of its size: the
cast, the zero point's subtraction, the scale's product), then multiplies. For Llama-3.2-1B's
output layer (128256 rows of 2048) that is three transient 1 GiB tensors per call. Measured on this
machine (a VM), the call took 0.9 s in a fresh process, 11 s right after the process had touched
6 GiB, and 8 s in the check's worker after the export (fresh memory pages are slow to come there):
most of the 1B program's check.

:func:`rows_in_chunks` makes each such layer, while the block runs, compute its output a block of
rows at a time (:data:`CHUNK_ELEMENTS` weights each, so a few tens of MiB of transients, reused):
the same op on a slice of the same weight (torchao's own slicing: whole rows, each with its own
scales and zero points), then the blocks side by side. Each output value is the same dot product
of the same numbers (the dequantization of a row depends on that row alone; the activations are
quantized per token, the same in every block), summed by the CPU's matrix product: bit for bit
with the whole layer on one CPU, within an ulp on another (an AMD EPYC's kernels sum a block of 7
rows in another order than 300: 6e-7 at most on values of about 1.8), as the tests hold it. The
program's own kernels are not touched: this is the reference's side.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

CHUNK_ELEMENTS = 8 * 2**20
"""Weights dequantized at once (32 MiB as float32): layers at most this big run whole."""


@contextlib.contextmanager
def rows_in_chunks(model: Any) -> Iterator[None]:
    """While the block runs, each linear layer of ``model`` (torch's ``Linear`` with its own
    ``forward``: not a subclass that computes something more) whose weight is torchao's
    ``IntxUnpackedToInt8Tensor`` with more than :data:`CHUNK_ELEMENTS` weights computes its output
    a block of rows at a time; its own ``forward`` is back afterwards."""
    import torch

    from ptebuild.models.executorch_llm.forwards import forwards_replaced

    with forwards_replaced([(module, _chunked_forward(module, _rows(module.weight))) for module in model.modules()
                            if isinstance(module, torch.nn.Linear) and type(module).forward is torch.nn.Linear.forward
                            and "forward" not in vars(module) and _rows(module.weight) < module.weight.shape[0]]):
        yield


def _rows(weight: Any) -> int:
    """Rows of ``weight`` per block; all of them where it is not a row-sliceable quantized weight."""
    from torchao.quantization import IntxUnpackedToInt8Tensor

    rows = int(weight.shape[0])
    if weight.dim() != 2 or not isinstance(weight, IntxUnpackedToInt8Tensor) or weight.block_size[0] != 1:
        return rows  # a block of rows must hold whole blocks of scales: torchao slices only so
    return max(1, min(rows, CHUNK_ELEMENTS // max(1, int(weight.shape[1]))))


def _chunked_forward(module: Any, rows: int) -> Any:
    import torch
    from torch.nn import functional

    def chunked_forward(inputs: Any) -> Any:
        weight, bias = module.weight, module.bias
        total = int(weight.shape[0])
        blocks = [functional.linear(inputs, weight[start:start + rows], None if bias is None else bias[start:start + rows])
                  for start in range(0, total, rows)]
        return torch.cat(blocks, dim=-1)

    return chunked_forward
