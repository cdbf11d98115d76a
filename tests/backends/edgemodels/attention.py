"""Transformer layers of PyTorch's own (``nn.TransformerEncoderLayer``: its
``nn.MultiheadAttention`` takes ``out_proj.weight`` itself) and a linear head; with ``tokens``,
the last layer's tokens are returned beside the head's output."""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4, outputs: int = 8, layers: int = 1, tokens: bool = False):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(dim, heads, dim * 2, dropout=0.0, batch_first=True, norm_first=True)
        self.more = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, heads, dim * 2, dropout=0.0, batch_first=True, norm_first=True)
            for _ in range(layers - 1)
        )
        self.head = nn.Linear(dim, outputs)
        self.tokens = tokens

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer(x)
        for layer in self.more:
            x = layer(x)
        logits = self.head(x.mean(1))
        return (logits, x) if self.tokens else logits


def make_block(**kwargs) -> Block:
    return Block(**kwargs)
