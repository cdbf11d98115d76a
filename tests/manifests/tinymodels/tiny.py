"""A tiny model with two methods and float, int64 and bool inputs."""

import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self, features: int = 6, width: int = 16, classes: int = 3):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(features, width), nn.ReLU(), nn.Linear(width, width))
        self.embedding = nn.Embedding(10, width)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.encoder(x)))

    def score(self, x: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.encoder(x) + self.embedding(tokens))
        logits = self.head(hidden)
        return torch.where(mask.unsqueeze(-1), logits, torch.zeros_like(logits))


def make_tiny(**kwargs) -> Tiny:
    return Tiny(**kwargs)
