"""swin_t's patch merging after a residual block, small: a quantized add, a pad, strided slices
(a pad whose input is quantized and whose output goes on in float)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


class PatchMerge(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.norm = torch.nn.LayerNorm(64)
        self.b = torch.nn.Linear(64, 10)

    def forward(self, x):
        y = self.a(x) + x
        y = F.pad(y, (0, 0, 0, y.shape[2] % 2, 0, y.shape[1] % 2))
        y = torch.cat([y[:, 0::2, 0::2], y[:, 1::2, 0::2], y[:, 0::2, 1::2], y[:, 1::2, 1::2]], -1)
        return self.b(self.norm(y)).mean(dim=(1, 2))


def make_patch_merge() -> PatchMerge:
    torch.manual_seed(0)
    return PatchMerge().eval()
