"""Weights where the manifest says (issue 26 item 6): with a data name, every weight of an XNNPACK
program, BatchNorm folded into a convolution or linear included, is in the ``.ptd``.

Before, XNNPACK's own FuseBatchNormPass made the folded weights after ptebuild tagged the
originals for the ``.ptd``, and they stayed in the ``.pte``'s named data: ExecuTorch's resnet8
example gave a 306,432-byte ``.pte`` and a 14,760-byte ``.ptd``.
"""

from __future__ import annotations

import torch
from torch import nn

from ptebuild.backends import get_backend
from ptebuild.lowering.check import check_program
from ptebuild.lowering.examples import make_inputs
from ptebuild.models.factory.lower import lower
from ptebuild.plan import InputPlan, MethodPlan, ProgramPlan
from ptebuild.runtime.ptd_file import read_ptd
from ptebuild.runtime.pte_file import open_pte
from ptebuild.runtime.weights_in_pte import weights_in_pte


class ConvBn(nn.Module):
    """Convolutions and a linear, each followed by a BatchNorm that XNNPACK folds into it."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 16, 3), nn.BatchNorm2d(16), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.head = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x):
        return self.head(self.features(x))


def conv_bn() -> ConvBn:
    torch.manual_seed(3)
    model = ConvBn()
    for module in model.modules():  # statistics that are not the identity, so that folding changes the weights
        if isinstance(module, nn.BatchNorm2d | nn.BatchNorm1d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    return model.eval()


def plan(backend: str) -> ProgramPlan:
    method = MethodPlan("forward", "forward", (InputPlan("x", (2, 3, 16, 16), "float32"),), ())
    defaults = get_backend(backend).check_defaults(get_backend(backend).options_model.model_validate({}))
    return ProgramPlan(
        name="convbn", model="convbn", backend=backend, factory="x:y", kwargs={}, weights=None, seed=5, sources=(),
        methods=(method,), data_name="convbn_weights", options={}, atol=defaults.atol, min_cosine=defaults.min_cosine,
        check_enabled=True, model_entry={}, program_entry={},
    )


def test_folded_batchnorm_weights_of_an_xnnpack_program_are_in_the_ptd(tmp_path):
    model, program = conv_bn(), plan("xnnpack")
    lowered = lower(model, program, {"forward": make_inputs(program.methods[0], program.seed)}, tmp_path, lambda _: None)
    pte, ptd = lowered.files["convbn.pte"], lowered.files["convbn_weights.ptd"]
    assert weights_in_pte(pte) == [] and lowered.warnings == []
    with open_pte(pte) as reader:
        assert reader.named_data() == []
    parameters = sum(p.numel() * 4 for name, p in model.named_parameters() if not name.endswith("bias"))
    assert pte.stat().st_size < 8 * 1024 < parameters <= ptd.stat().st_size
    assert len(read_ptd(ptd).keys) >= 4  # the folded weights and biases, by their SHA-256
    figures = check_program(model, program, pte, ptd)  # ExecuTorch's runtime finds them in the .ptd
    assert figures and max(f.max_abs_error for f in figures) < 1e-4
