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


@pytest.mark.parametrize("scheme", ["int8-dynamic"])
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


class RunningMean(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(8))
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        self.mean.mul_(0.9).add_(0.1 * x.mean(0))
        return self.lin(x - self.mean)


def test_a_state_static_quantization_updates_otherwise_is_refused():
    """PT2E applies the running mean's add_ to a quantized copy of the buffer: the state never
    accumulates, and the outputs stay within static int8's tolerances (a wrong program the check
    passed). The quantized model's state after a call is compared with the float model's."""
    torch.manual_seed(0)
    model = RunningMean().eval()
    x = torch.randn(4, 8) + 2
    exported = torch.export.export(model, (x,), strict=False)
    calibration = [(torch.randn(4, 8) + 2,) for _ in range(4)]
    with pytest.raises(ValueError, match=r"the model updates buffers in place \(mean\) and is PT2E-quantized"):
        _quantized(exported.module(), "int8", calibration)
    converted = _quantized(exported.module(), "int8-dynamic", calibration)  # activations not quantized: state kept
    assert torch.count_nonzero(dict(converted.named_buffers())["mean"]) == 0


def test_a_stateless_model_quantizes():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval()
    x = torch.randn(4, 8)
    exported = torch.export.export(model, (x,), strict=False)
    assert _quantized(exported.module(), "int8", [(x,)]) is not None
