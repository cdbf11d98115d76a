"""PT2E quantization for XNNPACK (``int8``, ``int8-dynamic``): calibration runs the model, and a
model with state (buffers it updates in place) must come out of it with the state it went in
with: the program is exported from the converted module, and its buffers are the program's
initial state. Torch and torchao only."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ptebuild.backends.xnnpack import _quantized


class Ema(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("steps", torch.zeros(1))
        self.register_buffer("ema", torch.zeros(8))
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        self.steps.add_(1)
        self.ema.mul_(0.9).add_(0.1 * x.mean(0))
        return self.lin(x - self.ema), self.steps.clone()


@pytest.mark.parametrize("scheme", ["int8", "int8-dynamic"])
def test_calibration_leaves_the_models_state_as_it_was(scheme):
    torch.manual_seed(0)
    model = Ema().eval()
    x = torch.randn(2, 8)
    exported = torch.export.export(model, (x,), strict=False)
    calibration = [(torch.randn(2, 8) + 3,) for _ in range(5)]
    converted = _quantized(exported.module(), scheme, calibration)
    state = dict(converted.named_buffers())
    assert float(state["steps"]) == 0.0
    assert torch.count_nonzero(state["ema"]) == 0
    again = torch.export.export(converted, (x,), strict=False)
    assert float(again.state_dict["steps"] if "steps" in again.state_dict else again.constants["steps"]) == 0.0
