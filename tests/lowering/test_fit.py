"""An eager failure explained as the manifest key that is wrong (:mod:`ptebuild.lowering.fit`)."""

from __future__ import annotations

import torch

from ptebuild.lowering.binding import bind
from ptebuild.lowering.fit import explain_misfit
from ptebuild.plan import InputPlan, MethodPlan


class Policy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.image = torch.nn.Conv2d(3, 4, 3)
        self.state = torch.nn.Linear(6, 4)

    def forward(self, image, state, gain):
        return self.image(image).mean((2, 3)) + self.state(state) * gain


def explain(model, *inputs: InputPlan, values):
    method = MethodPlan("forward", "forward", inputs, ())
    return explain_misfit(model.forward, bind(model.forward, method, "policy"), method, "policy", values)


def test_the_input_whose_shape_the_error_names_is_located():
    image, state, gain = InputPlan("image", (1, 3, 8, 8), "float32"), InputPlan("state", (1, 5), "float32"), InputPlan(
        "gain", (), "", kind="scalar", value=0.5)
    error = explain(Policy(), image, state, gain, values=(torch.randn(1, 3, 8, 8), torch.randn(1, 5), 0.5))
    assert error is not None and error.location == "models.policy.methods.forward.inputs[1].shape"
    assert error.message.startswith("[1, 5] does not fit the model: RuntimeError: mat1 and mat2 shapes cannot be multiplied (1x5 and 6x4)")


def test_an_error_that_names_no_single_input_is_located_at_the_list():
    class Sum(torch.nn.Module):
        def forward(self, a, b):
            return a + b

    a, b = InputPlan("a", (2, 3), "float32"), InputPlan("b", (2, 4), "float32")
    error = explain(Sum(), a, b, values=(torch.randn(2, 3), torch.randn(2, 4)))
    assert error is not None and error.location == "models.policy.methods.forward.inputs"
    assert error.message.startswith("the inputs (a [2, 3] float32, b [2, 4] float32) do not fit the model: RuntimeError: "
                                    "The size of tensor a (3) must match the size of tensor b (4)")


def test_a_model_that_runs_or_fails_for_its_own_reason_is_not_the_manifests_fault():
    class Refuses(torch.nn.Module):
        def forward(self, x):
            raise ValueError("the policy needs a calibrated camera")

    x = InputPlan("x", (2, 3), "float32")
    assert explain(Refuses(), x, values=(torch.randn(2, 3),)) is None
    assert explain(torch.nn.Linear(3, 2), InputPlan("input", (2, 3), "float32"), values=(torch.randn(2, 3),)) is None
