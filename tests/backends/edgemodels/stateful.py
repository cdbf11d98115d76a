"""A model that counts its calls in a buffer and returns the count (a clone of the updated state)."""

import torch
from torch import nn


class Counter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls.add_(1)
        return self.head(x), self.calls.clone()


def make_counter() -> Counter:
    return Counter()

