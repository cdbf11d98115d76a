"""The eager reference's quantized linear layers run a block of output rows at a time, to float32 rounding
as the whole layer does (ptebuild.models.executorch_llm.eager_linear)."""

from __future__ import annotations

import pytest
import torch
from torchao.quantization import Int8DynamicActivationIntxWeightConfig, IntxUnpackedToInt8Tensor, IntxWeightOnlyConfig, quantize_
from torchao.quantization.granularity import PerAxis, PerGroup

from ptebuild.models.executorch_llm import eager_linear
from ptebuild.models.executorch_llm.eager_linear import rows_in_chunks
from ptebuild.models.executorch_llm.eager_reference import eager_caller

DIM, VOCAB = 64, 300

# Upstream's quantization modes of linear layers (examples/models/llama/source_transformation/quantize.py).
CONFIGS = {
    "8da4w-g32": lambda: Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)),
    "8da8w-per-channel": lambda: Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0)),
    "8da4w-hqq": lambda: Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32),
                                                               intx_choose_qparams_algorithm="hqq_scale_only"),
    "4w-g16": lambda: IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(16)),
}


def _linear(config: str, bias: bool) -> torch.nn.Linear:
    torch.manual_seed(7)
    layer = torch.nn.Linear(DIM, VOCAB, bias=bias)
    quantize_(layer, CONFIGS[config]())
    assert isinstance(layer.weight, IntxUnpackedToInt8Tensor)
    return layer


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_a_block_of_rows_at_a_time_gives_the_whole_layers_values(monkeypatch, config, bias):
    layer = _linear(config, bias)
    inputs = torch.randn(1, 5, DIM, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        whole = layer(inputs)
        monkeypatch.setattr(eager_linear, "CHUNK_ELEMENTS", 7 * DIM)  # 7 rows a block: 43 blocks, the last of 6 rows
        with rows_in_chunks(layer):
            assert "forward" in vars(layer)
            blocks = layer(inputs)
    # the same dot products; a CPU's matrix product may sum a block's in another order (an ulp)
    torch.testing.assert_close(blocks, whole, rtol=1e-6, atol=1e-6)
    assert "forward" not in vars(layer)  # torch's forward is back


class _Scaled(torch.nn.Linear):
    """A linear layer that computes something more than torch's: left as it is."""

    def forward(self, inputs):
        return 2 * super().forward(inputs)


def test_small_plain_and_other_layers_run_whole(monkeypatch):
    plain = torch.nn.Linear(DIM, VOCAB)
    small = _linear("8da4w-g32", bias=False)  # VOCAB * DIM weights: under CHUNK_ELEMENTS
    scaled = _Scaled(DIM, VOCAB)
    quantize_(scaled, CONFIGS["8da4w-g32"]())
    with rows_in_chunks(torch.nn.Sequential(plain, small, scaled)):
        assert not {"forward"} & (vars(plain).keys() | vars(small).keys() | vars(scaled).keys())
    inputs = torch.randn(2, DIM)
    with torch.no_grad():
        expected = scaled(inputs)
        monkeypatch.setattr(eager_linear, "CHUNK_ELEMENTS", 8 * DIM)
        with rows_in_chunks(scaled):
            assert "forward" not in vars(scaled)
            assert torch.equal(scaled(inputs), expected)


class _Decoder(torch.nn.Module):
    """The shape of upstream's Transformer as the check calls it: (tokens, {"input_pos": ...})."""

    def __init__(self) -> None:
        super().__init__()
        self.tok_embeddings = torch.nn.Embedding(VOCAB, DIM)
        self.output = _linear("8da4w-g32", bias=False)

    def forward(self, tokens, attn_options=None):
        return self.output(self.tok_embeddings(tokens))


def test_the_eager_reference_never_dequantizes_a_whole_large_layer(monkeypatch):
    """Llama-3.2-1B's output layer dequantized whole on the check's call: three transient GiB, 8 s of
    the check in the worker after the export."""
    model = _Decoder().eval()
    tokens = torch.tensor([[1, 2, 3, 250]])
    with torch.no_grad():
        expected = model(tokens)[0, -1].to(torch.float64)
    monkeypatch.setattr(eager_linear, "CHUNK_ELEMENTS", 32 * DIM)
    seen: list[int] = []
    dequantize = IntxUnpackedToInt8Tensor.dequantize

    def spy(self):
        seen.append(self.qdata.numel())
        return dequantize(self)

    monkeypatch.setattr(IntxUnpackedToInt8Tensor, "dequantize", spy)
    logits = eager_caller(model, ())(tokens, torch.tensor([0]))
    assert seen and max(seen) <= 32 * DIM and sum(seen) == VOCAB * DIM
    assert torch.equal(logits, expected)
