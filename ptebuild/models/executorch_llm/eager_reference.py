"""The eager model as the generation check calls it: upstream's model after its source transforms,
its KV cache zeroed as the runtime's planned memory is, called as the program is (a prompt in one
call where it takes a dynamic sequence, else a token per call) or once over the whole sequence
where that computes what its step-by-step calls would (:func:`takes_whole_sequence`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Shape:
    """How the program is called (from the model's table): a KV cache, a dynamic sequence."""

    use_kv_cache: bool
    dynamic: bool
    max_seq_length: int
    context_length: int

    @property
    def positions(self) -> int:
        """How many tokens one sequence may hold: the KV cache's length, else one call's."""
        if self.use_kv_cache:
            return self.context_length
        return self.max_seq_length - 1 if self.dynamic else self.max_seq_length


class Stepper:
    """Calls ``forward`` of the program or of the eager model as an LLM runner does."""

    def __init__(self, call: Any, shape: Shape) -> None:
        self.call, self.shape = call, shape
        self.tokens: list[int] = []

    def feed(self, tokens: list[int]) -> Any:
        """Feed ``tokens`` after those fed so far; return the logits of the last one."""
        import torch

        start = len(self.tokens)
        self.tokens += tokens
        if not self.shape.use_kv_cache:
            ids = self.tokens if self.shape.dynamic else (self.tokens + [0] * self.shape.max_seq_length)[: self.shape.max_seq_length]
            return self.call(torch.tensor([ids], dtype=torch.long), None)
        if self.shape.dynamic:
            return self.call(torch.tensor([tokens], dtype=torch.long), torch.tensor([start], dtype=torch.long))
        logits = None
        for offset, token in enumerate(tokens):
            logits = self.call(torch.tensor([[token]], dtype=torch.long), torch.tensor([start + offset], dtype=torch.long))
        return logits


def _logit_rows(value: Any) -> Any:
    """The logits of each position a call returned, one row each (float64, on the CPU)."""
    import torch

    out = value[0] if isinstance(value, (list, tuple)) else value
    out = out.detach().to("cpu", torch.float64)  # the eager model's on the GPU, beside the program's
    return out.reshape(-1, out.shape[-1])


def last_logits(value: Any) -> Any:
    return _logit_rows(value)[-1]


def eager_caller(model: Any, mutable_buffers: tuple[str, ...], device: str = "cpu") -> Any:
    """``call(tokens, input_pos, every=False)`` of the eager model (on ``device``), its mutable
    buffers zeroed first: the last position's logits, or (``every``) each position's rows. Its
    quantized embeddings dequantize only the rows looked up (:mod:`.eager_embedding`), its large
    quantized linear layers a block of rows at a time (:mod:`.eager_linear`): the same values."""
    import torch

    from ptebuild.models.executorch_llm.eager_embedding import looked_up_rows
    from ptebuild.models.executorch_llm.eager_linear import rows_in_chunks

    buffers = dict(model.named_buffers())
    with torch.no_grad():
        for name in mutable_buffers:
            if name in buffers:
                buffers[name].zero_()

    def call(tokens: Any, input_pos: Any, every: bool = False) -> Any:
        tokens = tokens.to(device)
        with torch.no_grad(), looked_up_rows(model), rows_in_chunks(model):
            out = model(tokens) if input_pos is None else model(tokens, {"input_pos": input_pos.to(device)})
        return _logit_rows(out) if every else last_logits(out)

    return call


PLAIN_KV_CACHES = frozenset({"KVCache", "CustomKVCache"})
"""Upstream's KV caches that store each position's keys and values as computed (float): a call
over many tokens attends to what its step-by-step calls would read back. A quantized cache (the
current call attends to its own keys unquantized), a ring buffer or an attention sink do not."""


def takes_whole_sequence(model: Any, shape: Shape, length: int) -> bool:
    """Whether one eager call over ``length`` tokens from position 0 gives, at every position, the
    logits its step-by-step calls would: upstream's ``Transformer`` (every position's logits with
    ``generate_full_logits``), a dynamic sequence ``length`` fits (``max_seq_length - 1``, the
    program's own bound), no KV-sharing layers (upstream skips them in a call of many tokens) and
    only :data:`PLAIN_KV_CACHES`."""
    if not shape.dynamic or length > shape.max_seq_length - 1:
        return False
    if not isinstance(getattr(model, "generate_full_logits", None), bool):
        return False
    if getattr(model, "num_kv_shared_layers", None):
        return False
    caches = {type(module).__name__ for module in model.modules() if "kvcache" in type(module).__name__.lower()}
    return caches <= PLAIN_KV_CACHES


def eager_logits(model: Any, mutable_buffers: tuple[str, ...], shape: Shape, prompt: list[int], fed: list[int],
                 device: str = "cpu", whole: bool | None = None) -> list[Any]:
    """The eager model's logits of the prompt's last token and of each token of ``fed`` after it
    (teacher forcing): ``1 + len(fed)`` rows. One call over the whole sequence where
    :func:`takes_whole_sequence` (``whole`` overrides), else called as the program is
    (:class:`_Stepper`). The model's mutable buffers are zeroed first."""
    import torch

    call = eager_caller(model, mutable_buffers, device)
    tokens = prompt + fed
    if whole is None:
        whole = takes_whole_sequence(model, shape, len(tokens))
    if whole:
        saved = model.generate_full_logits
        model.generate_full_logits = True
        try:
            rows = call(torch.tensor([tokens], dtype=torch.long),
                        torch.tensor([0], dtype=torch.long) if shape.use_kv_cache else None, every=True)
        finally:
            model.generate_full_logits = saved
        return [rows[index] for index in range(len(prompt) - 1, len(tokens))]
    stepper = Stepper(call, shape)
    return [stepper.feed(prompt)] + [stepper.feed([token]) for token in fed]
