"""Small recurrent models the tests share (imported by bare name: pytest puts ``tests/`` on ``sys.path``)."""

from __future__ import annotations

import torch


class KeywordSpotter(torch.nn.Module):
    """A keyword spotter's shape: a convolution over time, then a GRU; with ``classes``, a linear
    on the GRU's outputs (the class scores)."""

    def __init__(self, classes: int | None = None) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 8, 3, padding=1)
        self.gru = torch.nn.GRU(8, 8, batch_first=True)
        self.fc = torch.nn.Linear(8, classes) if classes else None

    def forward(self, x):
        y = self.gru(self.conv(x).transpose(1, 2))[0]
        return self.fc(y) if self.fc is not None else y
