"""The eager reference's quantized embeddings, looked up row by row.

ExecuTorch's LLM export quantizes a model's embedding (``embedding_quantize = "<bits>,<group>"``)
into upstream's ``QuantizedGroupEmbedding``, whose eager ``forward`` calls the
``quantized_decomposed.embedding_{byte,4bit,2bit}`` reference ops: they dequantize the whole table
and then look the tokens up. For Llama-3.2-1B's table (128256 rows of 2048) that is 262 M values
dequantized on every call to read 32 rows: 0.66 s a call on this machine (0.002 s for the rows),
and a transient float32 copy of the table (1 GiB) in the check's process.

:func:`looked_up_rows` makes each such module, while the block runs, hand the same op only the rows
its tokens name (weights and scales, row ``i`` of the gathered table for the ``i``-th token). Every
value of the table's dequantization depends on its own row alone (each row's scales, its packed
bytes), so the result is the same op's result on the same numbers: bit for bit what the whole
table gives (tested). The program's own kernels are not touched: this is the reference's side.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def looked_up_rows(model: Any) -> Iterator[None]:
    """While the block runs, each ``QuantizedGroupEmbedding`` of ``model`` dequantizes only the rows
    its tokens look up; its own ``forward`` is back afterwards."""
    from executorch.examples.models.llama.source_transformation.quantize import QuantizedGroupEmbedding

    from ptebuild.models.executorch_llm.forwards import forwards_replaced

    with forwards_replaced([(module, _rows_forward(module)) for module in model.modules()
                            if isinstance(module, QuantizedGroupEmbedding)]):
        yield


def _rows_forward(module: Any) -> Any:
    import torch

    forward = type(module).forward

    def rows_forward(indices: Any) -> Any:
        flat = indices.reshape(-1)
        weight, scales = module.weight, module.scales
        # Registered buffers: assigning tensors replaces them for this call, restored below.
        module.weight, module.scales = weight[flat], scales[flat]
        try:
            return forward(module, torch.arange(flat.numel(), device=indices.device).reshape(indices.shape))
        finally:
            module.weight, module.scales = weight, scales

    return rows_forward
