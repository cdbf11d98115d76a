"""The ``[models.NAME]`` table of an ``executorch-multimodal`` model (pydantic; validated when the
manifest is loaded, shown by ``ptebuild schema``).

A model that hears (or, later, sees) and answers in text, from one of ExecuTorch's own multimodal
definitions (``family``), exported by upstream's own export code into one program of several
methods (for Voxtral Realtime: ``audio_encoder``, ``token_embedding``, ``text_decoder``), as
ExecuTorch's ``MultimodalRunner`` loads it. Its sizes come from a params JSON in the family's own
format (upstream's ``params.json``); its weights from a checkpoint in the family's own layout, or
random from ``seed``. Imports pydantic only.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator

FAMILIES = ("voxtral-realtime",)
"""The multimodal definitions of ExecuTorch 1.5.1 ptebuild exports (``examples/models/<family>``)."""

MetadataValue = StrictInt | StrictBool | list[StrictInt]


class MultimodalModelSpec(BaseModel):
    """A speech-to-text model from ExecuTorch's own definitions, exported as one program of several
    methods (encoder, token embedding, text decoder with its KV cache) for ExecuTorch's MultimodalRunner."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    kind: Literal["executorch-multimodal"]
    family: Literal[FAMILIES]  # type: ignore[valid-type]  # a Literal of the tuple above
    """Which of ExecuTorch's multimodal definitions: ``voxtral-realtime`` (Voxtral Realtime: a causal
    Whisper-style audio encoder, an adapter and a Mistral text decoder; ``examples/models/voxtral_realtime``)."""
    params: str
    """The model's ``params.json`` in the family's own format (for Voxtral Realtime: Mistral's, with
    ``multimodal.whisper_model_args``), relative to the manifest."""
    checkpoint: Annotated[str, Field(json_schema_extra={"pattern": r"\.safetensors$"})] | None = None
    """The family's checkpoint (Voxtral Realtime: ``consolidated.safetensors``), relative to the
    manifest, loaded by upstream's own loader; absent: random weights from ``seed``."""
    tokenizer: str
    """The tokenizer the runner uses (a ``tokenizer.json``, a tiktoken file or a SentencePiece
    model), relative to the manifest. Written beside each program."""
    max_seq_length: Annotated[int, Field(ge=16)] = 128
    """The text decoder's KV cache: the most positions a conversation holds (prompt, audio and generated tokens)."""
    max_audio_seconds: Annotated[float, Field(gt=0, le=240)] = 30.0
    """The longest audio the ``audio_encoder`` takes in one call, in seconds of 16 kHz audio (upstream's
    export allows 240 s, whose memory plan, sized for the longest input, is about 4 GB even for a tiny model)."""
    metadata: dict[str, MetadataValue] = {}
    """Metadata methods written into the program over the ones derived from the model and the
    tokenizer (``get_max_seq_len``, ``get_bos_id``, ``get_eos_ids``...)."""
    seed: int = 0
    """``torch.manual_seed`` before the model is made: its random weights when there is no checkpoint,
    and the check's seeded audio and prompt."""
    sources: list[str] = []
    """Extra files (globs relative to the manifest) whose content the build depends on."""

    @field_validator("metadata")
    @classmethod
    def _method_names(cls, value: dict[str, MetadataValue]) -> dict[str, MetadataValue]:
        from ptebuild.models.executorch_llm.spec import metadata_names

        return metadata_names(value, ("audio_encoder", "token_embedding", "text_decoder"))

    @field_validator("checkpoint")
    @classmethod
    def _safetensors(cls, value: str | None) -> str | None:
        if value is not None and not value.endswith(".safetensors"):
            raise ValueError(f"{value!r}: Voxtral Realtime's loader reads consolidated.safetensors (Mistral's layout); "
                             "give that file, or leave checkpoint out for random weights")
        return value

    @property
    def audio_frames(self) -> int:
        """The most mel frames one ``audio_encoder`` call takes (hop 160 at 16 kHz: 100 a second),
        a multiple of 8 (the encoder's two strided convolutions and the adapter's downsampling)."""
        return max(8, int(self.max_audio_seconds * 100) // 8 * 8)
