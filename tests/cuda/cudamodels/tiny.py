"""A tiny MLP for the CUDA backend's committed test data: small .so, small .ptd."""

import torch
from torch import nn


class TinyMlp(nn.Module):
    def __init__(self, features: int = 8, width: int = 16, outputs: int = 4):
        super().__init__()
        self.hidden = nn.Linear(features, width)
        self.out = nn.Linear(width, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x)))


def make_tiny(**kwargs) -> TinyMlp:
    return TinyMlp(**kwargs)
