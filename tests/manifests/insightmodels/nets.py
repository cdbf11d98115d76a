"""Small models for the figures tests (tests/test_insight.py): a CNN that XNNPACK takes whole but
for one mean, and a model whose cumsum and argmax XNNPACK does not take."""

import torch
from torch import nn


class Cnn(nn.Module):
    def __init__(self, channels: int = 8, classes: int = 4, fallback: bool = False):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1)
        self.norm = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.head = nn.Linear(channels, classes)
        self.fallback = fallback

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.norm(self.conv(image)))
        y = nn.functional.max_pool2d(torch.relu(self.conv2(y)), 2)
        logits = self.head(y.mean((2, 3)))
        if self.fallback:  # operators XNNPACK does not take: the release that falls back to kernels
            logits = torch.cumsum(logits, 1)
        return logits


class Mixed(nn.Module):
    """A linear encoder, then cumsum and argmax, which XNNPACK does not take."""

    def __init__(self, width: int = 16):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, width))

    def forward(self, x: torch.Tensor):
        z = self.encoder(x)
        return torch.cumsum(z, 1), torch.argmax(z, dim=1)


def make_cnn(**kwargs) -> Cnn:
    return Cnn(**kwargs).eval()


def make_mixed(**kwargs) -> Mixed:
    return Mixed(**kwargs).eval()
