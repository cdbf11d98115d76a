"""A model's state (:mod:`ptebuild.lowering.state`): the buffers a call updates, restored after."""

from __future__ import annotations


def test_updated_buffers_names_the_state_a_call_changes_and_restores_it():
    import torch

    from ptebuild.lowering.state import updated_buffers
    from ptebuild.plan import InputPlan, MethodPlan, ProgramPlan

    class Counter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("calls", torch.zeros(1))
            self.register_buffer("scale", torch.ones(1))

        def forward(self, x):
            self.calls.add_(1)
            return x * self.scale

    model = Counter()
    method = MethodPlan("forward", "forward", (InputPlan("x", (2, 3), "float32"),), ())
    program = ProgramPlan(name="p", model="counter", backend="vulkan", factory="m:f", kwargs={}, weights=None, seed=0,
                          sources=(), methods=(method,), data_name=None, options={}, atol=1e-4, min_cosine=0.9999,
                          check_enabled=True, model_entry={}, program_entry={})
    assert updated_buffers(model, program) == ["calls"]
    assert float(model.calls) == 0.0
    assert updated_buffers(torch.nn.Linear(3, 3), program) == []
