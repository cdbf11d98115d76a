"""Models for the ``misfit-*.toml`` manifests: each declares inputs, a factory or weights that do
not fit, found while exporting (tests/worker/test_export_errors.py)."""

from __future__ import annotations

import torch
from torch import nn


class Add(nn.Module):
    def forward(self, x, y):
        return x + y


class Conv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.conv(x)


def make(width: int = 4) -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(width, width)


def add() -> nn.Module:
    return Add()


def conv() -> nn.Module:
    return Conv()


def embedding() -> nn.Module:
    return nn.Embedding(10, 4)


def save_conv_weights(path) -> None:
    """Weights of another model (a Conv2d in a module), for ``misfit-weights.toml``."""
    torch.save(Conv().state_dict(), path)


class Steps(nn.Module):
    """A Python loop over a dim: torch.export makes it the constant it traced."""

    def forward(self, x):
        return torch.stack([x[:, i] * (i + 1) for i in range(x.shape[1])], 1)


class Halves(nn.Module):
    """Pairs of a dim summed: the dim must be even."""

    def forward(self, x):
        return x.reshape(x.shape[0], x.shape[1] // 2, 2).sum(-1)


def steps() -> nn.Module:
    return Steps()


def halves() -> nn.Module:
    return Halves()
