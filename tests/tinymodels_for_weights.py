"""Helpers that save state dicts of the tiny model, for the weights-file tests."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "manifests"))


def save_weights(path: Path, *, width: int, seed: int):
    """Save a freshly seeded tiny model's state dict; return (path, the eager model's forward)."""
    import torch
    from tinymodels.tiny import make_tiny

    torch.manual_seed(seed)
    model = make_tiny(width=width).eval()
    torch.save(model.state_dict(), path)

    def forward(x):
        with torch.no_grad():
            return model(x)

    return path, forward
