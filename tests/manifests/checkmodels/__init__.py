"""Models whose checks tell the truth (issue 26): half precision, a wrong program, degenerate
references, an order-dependent int8 program, a classifier calibrated on real samples.

Built in the tests from ``tests/manifests/checks.toml``; every model is small and seeded.
"""

from __future__ import annotations

import torch
from torch import nn


def mlp(dtype: str = "bfloat16") -> nn.Module:
    """The issue's half-precision MLP: ``Linear(64,128), GELU, Linear(128,32)`` in ``dtype``."""
    return nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 32)).to(getattr(torch, dtype))


def linear_layer_norm(dtype: str = "float16") -> nn.Module:
    """A float16 Linear then LayerNorm: ExecuTorch 1.5.1's CPU layer_norm kernel computes
    something else in float16 (seen: outputs 25 times too large, cosine 0.98)."""
    return nn.Sequential(nn.Linear(64, 256), nn.LayerNorm(256)).to(getattr(torch, dtype))


class ZeroHead(nn.Module):
    """A head that starts at zero, as torchvision's vit_b_16 does: eager outputs all zeros."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(16, 32)
        self.head = nn.Linear(32, 10)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x)))


class SmallPolicy(nn.Module):
    """The issue's CNN+MLP policy, smaller: an image and a state, BatchNorm, global average
    pooling, tanh actions. Statically quantized for XNNPACK with a dynamic batch, it answered
    wrongly once a larger batch followed a smaller one (XNNPACK's quantized mean)."""

    def __init__(self) -> None:
        super().__init__()
        self.cnn = nn.Sequential(nn.Conv2d(3, 16, 5, stride=2, padding=2), nn.BatchNorm2d(16), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.mlp = nn.Sequential(nn.Linear(16 + 8, 32), nn.ReLU(), nn.Linear(32, 6), nn.Tanh())
        with torch.no_grad():
            bn = self.cnn[1]
            bn.running_mean.uniform_(-0.2, 0.2)
            bn.running_var.uniform_(0.5, 1.5)

    def forward(self, image: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return self.mlp(torch.cat([self.cnn(image), state], dim=1))


# -- a classifier on readings far from N(0, 1) -------------------------------------------------

FEATURES, CLASSES = 16, 4
OFFSET, SPREAD = 100.0, 10.0


def readings(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sensor-like readings around 100 (nothing like the N(0, 1) noise of generated inputs) and
    their classes: each class's readings lie around its own prototype."""
    generator = torch.Generator().manual_seed(seed)
    prototypes = torch.randn(CLASSES, FEATURES, generator=torch.Generator().manual_seed(1234))
    labels = torch.randint(0, CLASSES, (count,), generator=generator)
    noise = 0.3 * torch.randn(count, FEATURES, generator=generator)
    return OFFSET + SPREAD * (prototypes[labels] + noise), labels


def classifier() -> nn.Module:
    """A small MLP trained (seeded, a fraction of a second) to classify :func:`readings`."""
    model = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES))
    x, y = readings(512, seed=7)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    with torch.enable_grad():  # a factory may be called under torch.no_grad()
        for _ in range(150):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
    return model.eval().requires_grad_(False)


def classifier_samples() -> list[tuple[torch.Tensor]]:
    """Real inputs of the classifier: eight batches of eight readings (a samples factory)."""
    x, _ = readings(64, seed=99)
    return [(batch,) for batch in x.split(8)]
