"""Models of the kinds users bring, for ``people.toml``."""

from __future__ import annotations

import torch


class Recurrent(torch.nn.Module):
    """A recurrent cell: a state ``(h, c)``, a dict of observations and a scalar gain in; a dict
    holding the action and the new state, and a list, out."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = torch.nn.LSTMCell(6, 8)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x, state, obs, gain):
        h, c = self.cell(x + obs["bias"], state)
        return {"action": self.head(h) * gain, "state": (h, c)}, [obs["extra"].sum(dim=1)]


class Histogram(torch.nn.Module):
    """``torch.histc``: it lowers, but ExecuTorch's portable kernels have no ``aten::histc.out``."""

    def forward(self, x):
        return torch.histc(x, bins=4)


class Raises(torch.nn.Module):
    """A forward that raises, with a message that ends in a list."""

    def forward(self, x):
        raise ValueError("the policy needs a calibrated camera:\n  - front\n  - wrist")


def recurrent() -> Recurrent:
    return Recurrent()


def histogram() -> Histogram:
    return Histogram()


def raises() -> Raises:
    return Raises()
