"""Decoders written as people write them, for ``decoders.toml``.

- :class:`HfStyleDecoder`: the Hugging Face signature, ``forward(input_ids=None,
  inputs_embeds=None, cache_position=None)``; the manifest declares ``input_ids`` and
  ``cache_position`` only, so they must bind by name (by position ``cache_position`` would land
  in ``inputs_embeds``).
- :class:`KvCacheDecoder`: a static KV cache in buffers written in place with ``index_copy_``,
  one token per call, as ExecuTorch's own LLM examples keep theirs; its factory does not call
  ``requires_grad_(False)``: lowering must run under ``torch.no_grad()``.
"""

from __future__ import annotations

import torch
from torch import nn


class HfStyleDecoder(nn.Module):
    def __init__(self, vocab: int = 32, dim: int = 16, max_len: int = 16) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(max_len, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, input_ids=None, inputs_embeds=None, cache_position=None, scale: float = 1.0):
        position_ids = cache_position[None, :]  # HF's models index cache_position this way
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        hidden = inputs_embeds + self.positions(position_ids)
        return self.lm_head(hidden + self.mlp(hidden)) * scale


class KvCacheDecoder(nn.Module):
    """One attention layer over a static KV cache (buffers, updated in place)."""

    def __init__(self, vocab: int = 32, dim: int = 16, max_len: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.wq, self.wk, self.wv = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.out = nn.Linear(dim, vocab)
        self.register_buffer("k_cache", torch.zeros(1, max_len, dim))
        self.register_buffer("v_cache", torch.zeros(1, max_len, dim))
        self.register_buffer("positions", torch.arange(max_len))

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)  # [1, 1, dim]
        self.k_cache.index_copy_(1, input_pos, self.wk(x))
        self.v_cache.index_copy_(1, input_pos, self.wv(x))
        mask = self.positions <= input_pos[0]
        attention = torch.nn.functional.scaled_dot_product_attention(
            self.wq(x), self.k_cache, self.v_cache, attn_mask=mask[None, None, :]
        )
        return self.out(attention)


def hf_style() -> HfStyleDecoder:
    return HfStyleDecoder()


def kv_cache() -> KvCacheDecoder:
    return KvCacheDecoder()
