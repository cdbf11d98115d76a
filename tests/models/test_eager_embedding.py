"""The eager reference's quantized embeddings dequantize only the rows looked up, bit for bit as
the whole table does (ptebuild.models.executorch_llm.eager_embedding)."""

from __future__ import annotations

import pytest
import torch
from executorch.examples.models.llama.source_transformation import quantize

from ptebuild.models.executorch_llm.eager_embedding import looked_up_rows
from ptebuild.models.executorch_llm.eager_reference import eager_caller

VOCAB, DIM = 300, 64


def _embedding(bits: int, group_size: int) -> torch.nn.Module:
    """Upstream's QuantizedGroupEmbedding with random quantized rows and scales of its own shapes."""
    module = quantize.QuantizedGroupEmbedding("cpu", VOCAB, DIM, group_size, dtype=torch.float32,
                                              packed=bits != 8, bitwidth=bits)
    generator = torch.Generator().manual_seed(bits * 100 + group_size)
    if bits == 8:
        module.weight = torch.randint(-128, 128, module.weight.shape, dtype=torch.int8, generator=generator)
    else:
        module.weight = torch.randint(0, 256, module.weight.shape, dtype=torch.uint8, generator=generator)
    module.scales = (torch.rand(module.scales.shape, generator=generator) + 0.01).to(module.scales.dtype)
    return module


class _Decoder(torch.nn.Module):
    """The shape of upstream's Transformer as the check calls it: (tokens, {"input_pos": ...})."""

    def __init__(self, embedding: torch.nn.Module) -> None:
        super().__init__()
        self.tok_embeddings = embedding
        self.output = torch.nn.Linear(DIM, 16)

    def forward(self, tokens, attn_options=None):
        return self.output(self.tok_embeddings(tokens))


@pytest.mark.parametrize(("bits", "group_size"), [(8, 0), (8, 16), (4, 32), (4, 0), (2, 32)])
def test_the_rows_looked_up_give_the_whole_tables_values(bits, group_size):
    module = _embedding(bits, group_size)
    tokens = torch.tensor([[5, 299, 0, 5, 17, 123]])
    whole = module(tokens)
    with looked_up_rows(module):
        rows = module(tokens)
    assert torch.equal(rows, whole)
    assert "forward" not in vars(module)  # upstream's forward is back
    assert torch.equal(module(tokens), whole)


def test_the_eager_reference_never_dequantizes_the_whole_table(monkeypatch):
    """Failed before: every eager call handed the op all VOCAB rows (Llama-3.2-1B: 128256 of 2048,
    about 10 s of its check)."""
    model = _Decoder(_embedding(8, 0)).eval()
    tokens = torch.tensor([[1, 2, 3, 250]])
    expected = model(tokens)[0, -1]
    seen: list[int] = []
    packet = torch.ops.quantized_decomposed.embedding_byte
    original = packet.dtype

    def spy(weight, *args, **kwargs):
        seen.append(weight.shape[0])
        return original(weight, *args, **kwargs)

    monkeypatch.setattr(packet, "dtype", spy)
    logits = eager_caller(model, ())(tokens, torch.tensor([0]))
    assert seen == [tokens.numel()]
    assert torch.equal(logits, expected)
