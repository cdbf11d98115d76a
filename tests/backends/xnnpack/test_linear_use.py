"""Which ``nn.Linear`` layers torchao's 8da4w may quantize: those whose weight nothing but their
own forward takes (``nn.MultiheadAttention`` hands ``out_proj.weight`` to its functional form; a
model may tie an embedding to a linear's weight). Torch and torchao only: no lowering."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ptebuild.backends.xnnpack.linear_use import linears_used_elsewhere


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(64)
        self.attn = nn.MultiheadAttention(64, 4, batch_first=True)
        self.head = nn.Linear(64, 8)

    def forward(self, x):
        y, _ = self.attn(x, x, x, need_weights=False)
        return self.head(self.norm(x + y))


class Tied(nn.Module):
    """An embedding that reads its table from the output layer's weight."""

    def __init__(self) -> None:
        super().__init__()
        self.out = nn.Linear(32, 50, bias=False)
        self.mix = nn.Linear(32, 32)

    def forward(self, tokens):
        h = nn.functional.embedding(tokens, self.out.weight)
        return self.out(self.mix(h))


class Shared(nn.Module):
    """Two linears that share one weight, each called through its forward."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(32, 32), nn.Linear(32, 32)
        self.b.weight = self.a.weight
        self.count = nn.Parameter(torch.zeros(()), requires_grad=False)
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        self.calls += 1
        return self.b(torch.relu(self.a(x)))


def test_attention_out_projection_is_used_outside_its_forward():
    model = Attention().eval()
    found = linears_used_elsewhere(model, lambda m: m(torch.randn(2, 5, 64)))
    assert list(found) == ["attn.out_proj"]
    assert "multi_head_attention_forward" in found["attn.out_proj"]


def test_a_weight_an_embedding_reads_is_used_outside_its_forward():
    found = linears_used_elsewhere(Tied().eval(), lambda m: m(torch.tensor([[1, 2, 3]])))
    assert list(found) == ["out"] and "embedding" in found["out"]


def test_linears_called_through_their_forward_are_not_named_and_state_is_kept():
    model = Shared().eval()
    assert linears_used_elsewhere(model, lambda m: m(torch.randn(3, 32))) == {}
    assert int(model.calls) == 0  # the probe's call leaves the model's buffers as they were
    assert not any(h for m in model.modules() for h in (m._forward_hooks, m._forward_pre_hooks))


def test_the_8da4w_copy_of_an_attention_model_exports():
    """The refusal this fixes: torchao's 8da4w quantized out_proj, whose weight the attention
    transposes (``aten.t`` is not one of IntxUnpackedToInt8Tensor's operators)."""
    from ptebuild.backends import get_backend
    from ptebuild.backends.xnnpack import quantized_8da4w

    torch.manual_seed(3)
    model = Attention().eval()
    x = torch.randn(2, 5, 64)
    options = get_backend("xnnpack").options_model.model_validate({"quantize": "8da4w", "group_size": 32})
    with pytest.raises(Exception, match="aten.t"):
        torch.export.export(quantized_8da4w(model, options, "attention"), (x,), strict=False)
    quantized = quantized_8da4w(model, options, "attention", probe=lambda m: m(x))
    assert type(quantized.attn.out_proj.weight) is nn.Parameter and type(quantized.attn.out_proj.weight.data) is torch.Tensor
    assert type(quantized.head.weight.data) is not torch.Tensor  # still 4-bit
    [note] = get_backend("xnnpack").transform_notes(quantized)
    assert note.startswith("8da4w: 1 linear kept float: attn.out_proj (torch.nn.functional.multi_head_attention_forward)")
    exported = torch.export.export(quantized, (x,), strict=False)
    with torch.no_grad():
        assert torch.allclose(exported.module()(x), quantized(x), atol=1e-5)
