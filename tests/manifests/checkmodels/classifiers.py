"""torchvision-like classifiers from plain torch, initialised as torchvision initialises them
with ``weights=None`` (convolutions Kaiming-normal in fan-out, BatchNorm at 1 and 0), on 64x64
inputs: a resnet50-like net whose scores reach the hundreds, its resnet18-like sibling whose
scores stay near 1, and a mobilenet_v2-like net whose scores start near 1e-9."""

from __future__ import annotations

import torch
from torch import nn


def _init(model: nn.Module, linear_std: float | None = None) -> nn.Module:
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear) and linear_std is not None:
            nn.init.normal_(m.weight, 0, linear_std)
            nn.init.zeros_(m.bias)
    return model.eval()


def _stem() -> list[nn.Module]:
    return [nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * 4
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + (x if self.down is None else self.down(x)))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + (x if self.down is None else self.down(x)))


def _classifier(features: list[nn.Module], channels: int, classes: int = 100, dropout: bool = False) -> nn.Module:
    head: list[nn.Module] = [nn.AdaptiveAvgPool2d(1), nn.Flatten()] + ([nn.Dropout(0.2)] if dropout else [])
    return nn.Sequential(nn.Sequential(*features), nn.Sequential(*head, nn.Linear(channels, classes)))


def resnet50(blocks: tuple[int, ...] = (3, 4, 8, 3)) -> nn.Module:
    layers, cin = _stem(), 16
    for stage, (count, width) in enumerate(zip(blocks, (16, 32, 64, 128))):
        for index in range(count):
            layers.append(Bottleneck(cin, width, 2 if index == 0 and stage > 0 else 1))
            cin = width * 4
    return _init(_classifier(layers, cin))


def resnet18() -> nn.Module:
    layers, cin = _stem(), 16
    for stage, width in enumerate((16, 32, 64, 128)):
        for index in range(2):
            layers.append(BasicBlock(cin, width, 2 if index == 0 and stage > 0 else 1))
            cin = width
    return _init(_classifier(layers, cin))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int = 6) -> None:
        super().__init__()
        hidden = cin * expand
        self.residual = stride == 1 and cin == cout
        self.body = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


def mobilenet_v2() -> nn.Module:
    """torchvision's mobilenet_v2 layout: its scores start near 1e-9 with random weights."""
    stages = [(16, 1), (24, 2), (24, 1), (32, 2), (32, 1), (32, 1), (64, 2), (64, 1), (64, 1), (64, 1),
              (96, 1), (96, 1), (96, 1), (160, 2), (160, 1), (160, 1), (320, 1)]
    layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()]
    cin = 32
    for cout, stride in stages:
        layers.append(InvertedResidual(cin, cout, stride))
        cin = cout
    layers += [nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6()]
    return _init(_classifier(layers, 1280, dropout=True), linear_std=0.01)
