"""A transformer block of PyTorch's own layers (``nn.TransformerEncoderLayer``: its
``nn.MultiheadAttention`` takes ``out_proj.weight`` itself) and a linear head."""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4, outputs: int = 8):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(dim, heads, dim * 2, dropout=0.0, batch_first=True, norm_first=True)
        self.head = nn.Linear(dim, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(x).mean(1))


def make_block(**kwargs) -> Block:
    return Block(**kwargs)
