"""Voxtral Realtime (speech to text) from ExecuTorch 1.5.1's own definition and export code.

Upstream: ``executorch/examples/models/voxtral_realtime/``. ``model.py`` defines the model (a
causal Whisper-style audio encoder, an adapter that stacks its frames, a Mistral text decoder whose
KV cache is updated by ExecuTorch's ``llama::update_cache`` and attended by ``llama::custom_sdpa``)
and ``load_model`` (``params.json`` + ``consolidated.safetensors``, Mistral's layout);
``export_voxtral_rt.export_all`` exports its three methods:

- ``audio_encoder(mel: float32 [1, num_mel_bins, T])`` -> ``[1, T / 8, dim]``, ``T`` a multiple of 8;
- ``token_embedding(tokens: int64 [1, seq])`` -> ``[1, seq, dim]``;
- ``text_decoder(embeds: float32 [1, seq, dim], cache_position: int64 [seq])`` -> logits
  ``[1, seq, vocab_size]`` (every position), through its KV cache;

the layout ExecuTorch's ``MultimodalRunner`` loads. ptebuild calls these, and changes two things only:

- the audio's bound: upstream's ``Dim("_t_mel_base", max=3000)`` (240 s) makes the memory plan of
  ``audio_encoder`` hold attention over 12,000 frames (about 4 GB even for a tiny model); ptebuild
  bounds it by the model's ``max_audio_seconds`` for the duration of the export;
- random weights (no checkpoint): the model is made on the CPU after ``torch.manual_seed(seed)``,
  every module as its constructor makes it, and saved in upstream's checkpoint layout, which
  upstream's ``load_model`` then loads as it loads a real one.

Imports torch and executorch when called (a worker).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

METHODS = ("audio_encoder", "token_embedding", "text_decoder")
SAMPLE_RATE = 16000
HOP_LENGTH = 160
"""The mel frames upstream's audio front end makes (``sample_rate``, ``hop_length``: 100 frames a second)."""
FRAME_MULTIPLE = 8
"""``export_all``'s audio dim is ``8 * _t_mel_base``."""


@dataclass(frozen=True)
class Dims:
    """What the check and the metadata need of the model's config."""

    num_mel_bins: int
    dim: int
    vocab_size: int


def read_config(params: Path, max_seq_length: int, backend: str) -> Any:
    """Upstream's ``VoxtralRealtimeConfig`` from ``params.json``, set as ``load_model`` sets it."""
    from executorch.examples.models.voxtral_realtime.model import VoxtralRealtimeConfig

    config = VoxtralRealtimeConfig.from_params_json(str(params))
    config.max_seq_len = max_seq_length
    config.streaming = False
    config.backend = _model_backend(backend)
    return config


def _model_backend(backend: str) -> str:
    """The flavour of upstream's KV cache and SDPA: ExecuTorch's custom operators on the CPU backends."""
    return "portable" if backend == "portable" else "xnnpack"


def make_model(params: Path, checkpoint: Path | None, seed: int, max_seq_length: int, backend: str) -> Any:
    """The eager model, by upstream's ``load_model``: of ``checkpoint``, or of random weights from
    ``seed`` (:func:`random_checkpoint`), so that both take every step of upstream's loading (its
    time embedding, its RoPE tables, its tied output layer)."""
    import shutil
    import tempfile

    import torch
    from executorch.examples.models.voxtral_realtime.model import load_model

    # load_model reads a folder of params.json and consolidated.safetensors.
    folder = Path(tempfile.mkdtemp(prefix="ptebuild-voxtral-"))
    try:
        (folder / "params.json").symlink_to(params.resolve())
        if checkpoint is not None:
            (folder / "consolidated.safetensors").symlink_to(checkpoint.resolve())
        else:
            random_checkpoint(params, seed, max_seq_length, backend, folder / "consolidated.safetensors")
        with _quiet_stdout():
            model = load_model(str(folder), max_seq_len=max_seq_length, dtype=torch.float32, backend=_model_backend(backend))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    missing = [name for name, tensor in (*model.named_parameters(), *model.named_buffers()) if tensor.device.type == "meta"]
    if missing:
        from ptebuild.errors import ManifestError

        shown = ", ".join(repr(name) for name in missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise ManifestError(f"{checkpoint.name if checkpoint else 'the checkpoint'} lacks weights the model's params call for "
                            f"({shown}: upstream's loader left them unset); give the checkpoint of these params")
    return model.eval()


RUNTIME_STATE = ("decoder.output.weight", "decoder.freqs_", "decoder.inv_freq", "encoder.freqs_", ".kv_cache.")
"""What upstream's loader makes itself rather than reads (``load_model``'s ``runtime_prefixes``)."""


def random_checkpoint(params: Path, seed: int, max_seq_length: int, backend: str, path: Path) -> None:
    """Random weights in upstream's checkpoint layout: the model made on the CPU after
    ``torch.manual_seed(seed)``, every module as its constructor makes it, each weight saved under
    the checkpoint key that upstream's ``_map_checkpoint_key`` maps to it (checked, key by key)."""
    import torch
    from executorch.examples.models.voxtral_realtime.model import _MM_PREFIX, VoxtralRealtimeModel, _map_checkpoint_key
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    model = VoxtralRealtimeModel(read_config(params, max_seq_length, backend))
    weights = {}
    for name, tensor in model.state_dict().items():
        if any(part in name for part in RUNTIME_STATE) or name == "t_cond":
            continue
        key = checkpoint_key(name, _MM_PREFIX)
        if key is None or _map_checkpoint_key(key) != name:
            from ptebuild.errors import REPORT, BuildError

            raise BuildError(f"Voxtral Realtime's weight {name!r} has no key in upstream's checkpoint layout "
                             f"(model.py's _map_checkpoint_key); {REPORT}")
        weights[key] = tensor.contiguous()
    save_file(weights, str(path))
    del model, weights


def checkpoint_key(name: str, prefix: str) -> str | None:
    """The checkpoint key of the model's weight ``name``: the inverse of upstream's ``_map_checkpoint_key``."""
    if name.startswith("encoder.conv_layers."):
        return prefix + "whisper_encoder." + name.removeprefix("encoder.")
    if name.startswith("encoder."):
        return prefix + "whisper_encoder.transformer." + name.removeprefix("encoder.")
    if name == "adapter.w_in.weight":
        return prefix + "audio_language_projection.0.weight"
    if name == "adapter.w_out.weight":
        return prefix + "audio_language_projection.2.weight"
    if name == "decoder.tok_embeddings.weight":
        return prefix + "tok_embeddings.weight"
    if name.startswith("decoder."):
        return name.removeprefix("decoder.")
    return None


def dims(model: Any) -> Dims:
    config = model.config
    return Dims(num_mel_bins=int(config.num_mel_bins), dim=int(config.dim), vocab_size=int(config.vocab_size))


def export(model: Any, max_seq_length: int, audio_frames: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Upstream's ``export_all`` (float32, no quantization): the three methods' exported programs
    and upstream's metadata, the audio bounded by ``audio_frames`` mel frames."""
    import torch
    from executorch.examples.models.voxtral_realtime import export_voxtral_rt

    with _audio_bound(export_voxtral_rt, audio_frames // FRAME_MULTIPLE), _quiet_stdout(), torch.no_grad():
        programs, metadata, _packed = export_voxtral_rt.export_all(model, max_seq_length, backend="xnnpack")
    return programs, dict(metadata)


@contextlib.contextmanager
def _audio_bound(module: Any, base: int) -> Iterator[None]:
    """``module.Dim`` with ``_t_mel_base``'s upper bound ``base`` for the duration."""
    import torch

    original = module.Dim

    def bounded(name: str, *, min: int | None = None, max: int | None = None) -> Any:
        return torch.export.Dim(name, min=min, max=base if name == "_t_mel_base" else max)

    module.Dim = bounded
    try:
        yield
    finally:
        module.Dim = original


def methods_module(model: Any) -> Any:
    """The eager model as a module whose methods are the program's (``audio_encoder(mel)``,
    ``token_embedding(token_ids)``, ``text_decoder(input_embeds, cache_position)``), each upstream's
    own export wrapper called eagerly: what a backend's :meth:`~ptebuild.backends.base.Backend.
    transform_model` transforms (a copy with 8da4w linears) and the check compares with.
    ``.model`` is the model itself."""
    import torch
    from executorch.examples.models.voxtral_realtime.export_voxtral_rt import (
        AudioEncoderExport,
        TextDecoderExport,
        TokenEmbeddingExport,
    )

    class Methods(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def audio_encoder(self, mel: Any) -> Any:
            return AudioEncoderExport(self.model)(mel)

        def token_embedding(self, token_ids: Any) -> Any:
            return TokenEmbeddingExport(self.model)(token_ids)

        def text_decoder(self, input_embeds: Any, cache_position: Any) -> Any:
            return TextDecoderExport(self.model)(input_embeds, cache_position)

    return Methods(model).eval()


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """Upstream prints progress on stdout, which may be an executor's channel: to stderr (the log)."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def cache_buffers(methods: Any) -> tuple[str, ...]:
    """The names of the text decoder's KV cache buffers in :func:`methods_module`'s module."""
    return tuple(name for name, _ in methods.named_buffers() if ".kv_cache." in name)
