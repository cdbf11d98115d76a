"""CUDA models as people write them (tests/cuda/people_cuda.toml, on the GPU machine)."""

from __future__ import annotations

import torch
from torch import nn


class Aliased(nn.Module):
    """One tensor in output slots 0 and 2 (ExecuTorch 1.5's CUDA runtime frees it twice), and a
    strided output (a transpose)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        y = self.linear(x)
        return y, torch.relu(x), y, y.t()


class Recurrent(nn.Module):
    """A recurrent state ``(h, c)`` in and out, in a dict."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(8, 16)

    def forward(self, x, state):
        h, c = self.cell(x, state)
        return {"h": h, "c": c}


class Scatter(nn.Module):
    """``scatter``: lowers (ExecuTorch 1.5 does not check its fallback), would crash on the device."""

    def forward(self, x, index):
        return torch.zeros_like(x).scatter(1, index, x)


class Resize(nn.Module):
    """An antialiased resize: "missing fallback kernels" at lowering (ExecuTorch 1.5)."""

    def forward(self, x):
        return nn.functional.interpolate(x, scale_factor=0.5, mode="bilinear", antialias=True)


def aliased() -> Aliased:
    return Aliased()


def recurrent() -> Recurrent:
    return Recurrent()


def scatter() -> Scatter:
    return Scatter()


def resize() -> Resize:
    return Resize()
