"""The attention of ExecuTorch's Llama-style models, as ExecuTorch 1.5.1's CUDA kernel takes it.

ExecuTorch's CUDA backend compiles ``scaled_dot_product_attention`` to its own Triton kernel
(``executorch/backends/cuda/triton/kernels/sdpa.py``), which takes a boolean mask of four dims,
``[batch, 1, queries, keys]`` (True: attend), or none. ExecuTorch's own Llama attention
(``examples/models/llama/attention.py``, ``SDPA``), which its LLM export builds when the custom
SDPA operator is off (it is a CPU operator), passes the rows of its additive causal mask, a float
tensor of two dims ``[queries, keys]`` (0 where a position may be attended, -inf where not): the
kernel refuses it ("attn_mask head dimension must be 1"), the known limit ``cuda-attention-mask``.

:func:`use_boolean_masks` swaps each such ``SDPA`` module of a model for :class:`BooleanMaskSDPA`,
which computes the same attention with the same mask said the kernel's way: the positions where the
additive mask is 0, as booleans broadcast to ``[batch, 1, queries, keys]``. Softmax over scores
plus -inf and softmax over the scores kept by a boolean mask are the same numbers, so the eager
model the check compares with is unchanged. Imports torch when called (a worker).
"""

from __future__ import annotations

from typing import Any


def boolean_mask(mask: Any, batch: int) -> Any:
    """``mask`` (additive float or boolean, of 2 to 4 dims) as a boolean ``[batch, 1, L, S]``."""
    import torch

    allowed = mask if mask.dtype == torch.bool else mask == 0
    while allowed.dim() < 4:
        allowed = allowed.unsqueeze(0)
    return allowed.expand(batch, 1, allowed.shape[-2], allowed.shape[-1])


def _sdpa_class() -> type:
    from executorch.examples.models.llama.attention import SDPA

    return SDPA


def make_boolean_mask_sdpa(original: Any) -> Any:
    """A module computing what ``original`` (ExecuTorch's Llama ``SDPA``) computes, its mask boolean."""
    import torch
    import torch.nn.functional as F

    class BooleanMaskSDPA(torch.nn.Module):
        """ExecuTorch's Llama ``SDPA`` with the mask the CUDA kernel takes."""

        def __init__(self, dim: int, n_rep: int) -> None:
            super().__init__()
            self.dim = dim
            self.n_rep = n_rep

        def forward(self, input_pos: Any, q: Any, k: Any, v: Any, bsz: Any, seqlen: Any, mask: Any) -> Any:
            k = k.repeat_interleave(self.n_rep, dim=1)
            v = v.repeat_interleave(self.n_rep, dim=1)
            attn_mask = None if mask is None else boolean_mask(mask, q.shape[0])
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=0.0)
            return y.transpose(1, 2).reshape(bsz, seqlen, self.dim)

    return BooleanMaskSDPA(original.dim, original.n_rep)


def use_boolean_masks(model: Any) -> int:
    """Swap every ExecuTorch Llama ``SDPA`` module of ``model`` (in place); return how many."""
    sdpa = _sdpa_class()
    swapped = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is sdpa:
                setattr(module, name, make_boolean_mask_sdpa(child))
                swapped += 1
    return swapped
