"""A program's weights counted on the graphs its backend lowers: an int8 keyword spotter (a
convolution, a GRU, a linear) quantizes the convolution's and the linear's weights, and says the
GRU's stayed float because XNNPACK's scheme does not quantize it; a float program quantizes nothing."""

from __future__ import annotations

import pytest
import torch
from recurrent_models import KeywordSpotter

from ptebuild.insight.weights import WeightsSplit
from ptebuild.lowering.weights import weights_split


@pytest.fixture(scope="module")
def exported():
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    torch.manual_seed(0)
    model, x = KeywordSpotter(classes=3).eval(), torch.randn(1, 4, 12)
    float_ep = torch.export.export(model, (x,))
    prepared = prepare_pt2e(float_ep.module(), XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True)))
    prepared(x)
    return float_ep, torch.export.export(convert_pt2e(prepared), (x,))


def test_int8_names_what_it_quantized_and_what_stayed_float(exported):
    split = weights_split({"forward": exported[1]})
    quantized = {e.name: e for e in split.quantized}
    assert set(quantized) == {"conv.weight", "fc.weight"}
    assert quantized["conv.weight"].dtype == "int8" and quantized["conv.weight"].shape == (8, 4, 3)
    assert quantized["conv.weight"].bytes >= 8 * 4 * 3  # the int8 values, with their scales and zero points
    kept = {e.name: e.why for e in split.kept_float}
    assert kept["conv.bias"] == "the bias of a quantized aten.conv1d (kept float by design)"
    assert kept["gru.weight_ih_l0"] == "read by aten.gru.input, a recurrent layer, for which the quantizer has no pattern"
    assert set(kept) == {"conv.bias", "fc.bias", "gru.weight_ih_l0", "gru.weight_hh_l0", "gru.bias_ih_l0", "gru.bias_hh_l0"}
    warning = split.warning()
    assert warning is not None and warning.startswith("4 weights stayed float (1.7 KiB of ")
    assert "gru.weight_ih_l0, gru.weight_hh_l0, gru.bias_ih_l0 and 1 more: read by aten.gru.input" in warning
    assert WeightsSplit.from_json(split.to_json()) == split


def test_a_float_program_quantizes_nothing_and_says_nothing(exported):
    split = weights_split({"forward": exported[0]})
    assert not split.quantized and not split.kept_float and split.describe() == [] and split.warning() is None
    assert {e.name for e in split.entries} >= {"conv.weight", "gru.weight_ih_l0", "fc.weight"}


def test_8da4w_weights_are_4_bit_with_their_scales_and_the_rest_float():
    """torchao's 8da4w weights are tensor subclasses in the exported graph (read through
    ``access_subclass_inner_tensor``): they are counted as the 4-bit weights they are, packed two to
    a byte with their bfloat16 scales and zero points, not as float weights left unquantized."""
    from ptebuild.backends.xnnpack import quantized_8da4w

    class Options:
        group_size, skip_ungroupable, quantize = 32, False, "8da4w"

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.LayerNorm(32)).eval()
    ep = torch.export.export(quantized_8da4w(model, Options(), "p"), (torch.randn(2, 64),))
    split = weights_split({"forward": ep})
    [weight] = split.quantized
    assert (weight.name, weight.dtype, weight.shape) == ("0.weight", "int4", (32, 64))
    assert weight.bytes == 32 * 64 // 2 + 32 * 2 * 2 + 32 * 2  # int4 values, bfloat16 scales, int8 zero points
    assert weight.readers == ("aten.linear",)
    assert {e.name for e in split.kept_float} == {"0.bias", "1.weight", "1.bias"}
    assert split.warning() is None  # a linear's bias and a norm's scale stay float by design


def test_a_buffer_an_operator_writes_in_place_is_state_not_a_weight():
    """A KV cache that ExecuTorch's ``llama::update_cache`` writes (kept as a mutation of its argument
    by the export) is not counted among the weights."""
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (registers llama::update_cache)

    class Cached(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)
            self.register_buffer("k_cache", torch.zeros(1, 8, 1, 4))

        def forward(self, x: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
            value = self.proj(x).view(1, 1, 1, 4)
            torch.ops.llama.update_cache(value, self.k_cache, position[0].item())
            return self.k_cache.sum(dim=1)

    ep = torch.export.export(Cached().eval(), (torch.randn(1, 4), torch.tensor([0])))
    names = {e.name for e in weights_split({"forward": ep}).entries}
    assert names == {"proj.weight", "proj.bias"}
