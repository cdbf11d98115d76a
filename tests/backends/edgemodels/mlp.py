"""An MLP whose linears all take a multiple of 32 input features, and one that cannot be grouped."""

import torch
from torch import nn


class Mlp(nn.Module):
    def __init__(self, features: int = 64, width: int = 64, outputs: int = 8):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, width), nn.GELU(), nn.Linear(width, width), nn.ReLU())
        self.head = nn.Linear(width, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def make_mlp(**kwargs) -> Mlp:
    return Mlp(**kwargs)
