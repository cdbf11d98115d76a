"""ExecuTorch's Llama attention with the mask ExecuTorch's CUDA kernel takes: the same numbers."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from executorch.examples.models.llama.attention import SDPA

from ptebuild.models.executorch_llm.cuda_attention import boolean_mask, use_boolean_masks


def causal_rows(length: int, context: int, start: int) -> torch.Tensor:
    """Rows ``start..start+length`` of the additive causal mask, as ExecuTorch's Llama attention takes them."""
    full = torch.full((context, context), float("-inf")).triu(1)
    return full[start:start + length]


@pytest.mark.parametrize(("batch", "length", "start"), [(1, 5, 0), (2, 1, 7), (1, 3, 4)], ids=["prefill", "decode", "chunk"])
def test_the_boolean_mask_attention_computes_what_the_llama_attention_does(batch, length, start):
    heads, kv_heads, head_dim, context = 4, 2, 8, 16
    torch.manual_seed(0)
    q = torch.randn(batch, heads, length, head_dim)
    k = torch.randn(batch, kv_heads, context, head_dim)
    v = torch.randn(batch, kv_heads, context, head_dim)
    mask = causal_rows(length, context, start)
    holder = torch.nn.Module()
    holder.SDPA = SDPA(dim=heads * head_dim, head_dim=head_dim, n_rep=heads // kv_heads, max_context_len=context)
    expected = holder.SDPA(None, q, k, v, batch, length, mask)
    assert use_boolean_masks(holder) == 1 and type(holder.SDPA) is not SDPA
    actual = holder.SDPA(None, q, k, v, batch, length, mask)
    torch.testing.assert_close(actual, expected, rtol=1e-6, atol=1e-6)


def test_the_mask_is_said_the_kernels_way():
    mask = causal_rows(3, 8, 2)
    allowed = boolean_mask(mask, 2)
    # ExecuTorch 1.5.1's CUDA kernel: bool, [B, 1, L_q, L_kv] (backends/cuda/triton/kernels/sdpa.py)
    assert allowed.dtype == torch.bool and tuple(allowed.shape) == (2, 1, 3, 8)
    assert torch.equal(allowed[1, 0], mask == 0)
    assert boolean_mask(allowed, 2) is not None and tuple(boolean_mask(mask == 0, 1).shape) == (1, 1, 3, 8)
