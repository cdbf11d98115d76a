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
    """A recurrent state ``(h, c)`` in, a dict out: a cell written by hand (gates from two linears).
    Its outputs come out of the compiled code in another order than the method returns them
    (``c`` is computed first): the check maps them by the .pte's values, as the runtime does."""

    def __init__(self) -> None:
        super().__init__()
        self.ih = nn.Linear(8, 32)
        self.hh = nn.Linear(16, 32)

    def forward(self, x, state):
        h, c = state
        gates = self.ih(x) + self.hh(h)
        keep, write = torch.sigmoid(gates[:, :16]), torch.sigmoid(gates[:, 16:])
        c = keep * c + write * torch.tanh(gates[:, :16])
        return {"h": torch.tanh(c), "c": c}


class Lstm(nn.Module):
    """``nn.LSTMCell``: "missing fallback kernels" (``_thnn_fused_lstm_cell``) at lowering."""

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


def lstm() -> Lstm:
    return Lstm()


def scatter() -> Scatter:
    return Scatter()


def resize() -> Resize:
    return Resize()


class Upsampler(torch.nn.Module):
    """A decoder's upsampling path: 2-D transposed convolutions (stride 2, output padding, groups)
    and a 1-D one, which ExecuTorch 1.5.1's CUDA lowering has no kernel for
    (tests/cuda/test_cuda_conv_transpose.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Sequential(
            torch.nn.ConvTranspose2d(8, 8, 3, stride=2, padding=1, output_padding=1),
            torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1, groups=2, bias=False),
        )
        self.wave = torch.nn.ConvTranspose1d(4, 2, 5, stride=3, padding=1)

    def forward(self, x):
        image = self.up(x)
        return image, self.wave(image.mean(dim=2))


def upsampler() -> Upsampler:
    return Upsampler()


def attention() -> torch.nn.Module:
    """A float32 transformer layer: ExecuTorch 1.5.1's CUDA attention takes bfloat16 only."""
    return torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
