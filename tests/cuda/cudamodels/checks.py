"""Models for the check's CUDA cases (tests/cuda/checks_cuda.toml, on the GPU machine): the issue's
half-precision MLPs, and its dict-observation model that ExecuTorch 1.5.1's CUDA lowering got wrong."""

from __future__ import annotations

import torch
from torch import nn


def mlp(dtype: str = "bfloat16") -> nn.Module:
    """``Linear(64,128), GELU, Linear(128,32)`` in ``dtype``."""
    return nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 32)).to(getattr(torch, dtype))


class DictObservation(nn.Module):
    """A conv on ``obs["image"]``, a linear on ``obs["joints"][0] + obs["joints"][1]``; returns
    ``{"action": ..., "feature": z}`` (seen refused at cosine 0.42 on CUDA: the lowering computes
    something else, while torch's own AOTInductor is right to 6e-08)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.joints = nn.Linear(6, 8)
        self.head = nn.Linear(16, 4)

    def forward(self, obs):
        z = self.conv(obs["image"]).mean(dim=(2, 3))
        j = self.joints(obs["joints"][0] + obs["joints"][1])
        return {"action": torch.tanh(self.head(torch.cat([z, j], dim=1))), "feature": z}


def mlp_samples() -> list[tuple[torch.Tensor]]:
    """Real-looking inputs of the bfloat16 MLP (a samples factory)."""
    generator = torch.Generator().manual_seed(5)
    return [(torch.rand(4, 64, generator=generator).to(torch.bfloat16),) for _ in range(4)]
