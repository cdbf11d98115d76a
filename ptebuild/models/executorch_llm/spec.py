"""The manifest's tables for ExecuTorch's own LLM definitions: the model's, and its programs' options.

Spelled as ExecuTorch's LLM export spells them (``LlmConfig`` of executorch 1.5.1,
``extension/llm/export/config/llm_config.py``): what makes the model and its interface (the
model class, params, checkpoint, tokenizer, sequence and context lengths, KV cache, dynamic
shape, metadata) on the model; what decides how it is lowered (dtype, custom SDPA, quantization,
the backend's own switches) on each program. Imports pydantic, never torch.
"""

from __future__ import annotations

import functools
import re
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator, model_validator

from ptebuild.backends.options import BackendOptions

MODEL_CLASSES = (
    "stories110m", "llama2", "llama3", "llama3_1", "llama3_2",
    "qwen2_5_0_5b", "qwen2_5_1_5b", "qwen2_5_coder_32b", "qwen3_0_6b", "qwen3_1_7b", "qwen3_4b",
    "qwen3_5_0_8b", "qwen3_5_2b", "qwen3_5_4b", "phi_4_mini", "smollm2",
    "lfm2_350m", "lfm2_700m", "lfm2_1_2b", "lfm2_5_350m", "lfm2_5_1_2b",
)
"""``LlmConfig.base.model_class`` values ExecuTorch 1.5.1 builds from its own definitions
(``export_llama_lib.EXECUTORCH_DEFINED_MODELS`` less ``static_llama``, which its export does not
take this way): a test keeps this list equal to upstream's."""

ModelClass = Literal[MODEL_CLASSES]  # type: ignore[valid-type]  # a Literal of the tuple above

MetadataValue = StrictInt | StrictBool | list[StrictInt]


def metadata_names(value: dict[str, MetadataValue], methods: tuple[str, ...]) -> dict[str, MetadataValue]:
    """``value`` (a model's ``metadata`` table) if each name is an identifier and none is one of the
    model's ``methods``; else ValueError (pydantic's validation error at ``metadata``)."""
    for name in value:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"metadata method name {name!r} is not an identifier")
        if name in methods:
            raise ValueError(f"metadata may not name {name!r} (a method of the model)")
    return value


class LlmModelSpec(BaseModel):
    """A language model from ExecuTorch's own definitions (llama, qwen, phi, smollm...), exported by
    ExecuTorch's LLM export (``LlmConfig``); random weights from ``seed`` unless a checkpoint is given."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    kind: Literal["executorch-llm"]
    model_class: ModelClass | None = None
    """``LlmConfig.base.model_class``: which of ExecuTorch's model definitions (default ``llama3``;
    with ``huggingface``, the family of its ``model_type``: ``llama3``, ``phi_4_mini``, ``qwen2_5_0_5b``, ``qwen3_0_6b``)."""
    params: str | None = None
    """The model's params JSON (``dim``, ``n_layers``, ``n_heads``, ``vocab_size``...), relative to the
    manifest. Give it, or ``huggingface``."""
    checkpoint: str | None = None
    """A checkpoint in ExecuTorch's Llama layout (``torch.save`` state dict), relative to the manifest;
    absent: random weights from ``seed`` (not with ``huggingface``, which has its weights)."""
    huggingface: str | None = None
    """A Hugging Face causal LM saved in a folder (``config.json`` and ``model.safetensors``, or
    shards with ``model.safetensors.index.json``), relative to the manifest: Llama, Mistral, Phi-3, Qwen2 or Qwen3.
    Its config becomes the params, its weights are converted by ExecuTorch's own converter
    (``examples/models/*/convert_weights.py``); nothing is downloaded. Instead of ``params``."""
    tokenizer: str
    """The tokenizer the runner uses: a ``tokenizer.json`` (Hugging Face), a tiktoken file or a
    SentencePiece model, relative to the manifest. Written beside each program."""
    max_seq_length: Annotated[int, Field(ge=2)] = 128
    """``LlmConfig.export.max_seq_length``: the most tokens one call takes (the prompt's prefill)."""
    max_context_length: Annotated[int, Field(ge=2)] | None = None
    """``LlmConfig.export.max_context_length``: the KV cache's length; default ``max_seq_length``."""
    use_kv_cache: bool = True
    """``LlmConfig.model.use_kv_cache`` (upstream's default is false; a runner needs it to decode
    without recomputing the whole context)."""
    enable_dynamic_shape: bool = True
    """``LlmConfig.model.enable_dynamic_shape``: the prompt is prefilled in one call of any length."""
    metadata: dict[str, MetadataValue] = {}
    """Metadata methods written into the program over the ones derived from the model and the
    tokenizer (``get_bos_id``, ``get_eos_ids``, ``get_max_seq_len``...), as ``LlmConfig.base.metadata``."""
    seed: int = 0
    """``torch.manual_seed`` before the model is made: its random weights when there is no checkpoint."""
    sources: list[str] = []
    """Extra files (globs relative to the manifest) whose content the build depends on."""

    @field_validator("metadata")
    @classmethod
    def _method_names(cls, value: dict[str, MetadataValue]) -> dict[str, MetadataValue]:
        return metadata_names(value, ("forward",))

    @model_validator(mode="after")
    def _lengths(self) -> Self:
        if (self.params is None) == (self.huggingface is None):
            raise ValueError(
                "give params (a params JSON, with an optional checkpoint) or huggingface (a Hugging Face "
                "model folder)" + (", not both" if self.params is not None else "")
            )
        if self.huggingface is not None and self.checkpoint is not None:
            raise ValueError("a Hugging Face folder has its own weights: remove checkpoint (or give params instead)")
        if not self.use_kv_cache and not self.enable_dynamic_shape:
            raise ValueError(
                "use_kv_cache = false needs enable_dynamic_shape = true: without either, every call takes "
                "max_seq_length tokens, padded, and returns the logits of the last (a padding) position"
            )
        if self.max_context_length is not None and self.max_context_length < self.max_seq_length:
            raise ValueError(
                f"max_context_length ({self.max_context_length}) is shorter than max_seq_length "
                f"({self.max_seq_length}); the KV cache must hold at least one prompt"
            )
        return self

    @property
    def context_length(self) -> int:
        return self.max_context_length if self.max_context_length is not None else self.max_seq_length


_EMBEDDING = re.compile(r"(?P<bits>[248]),(?P<group>\d+)")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

METADATA_METHODS = (
    "get_max_seq_len", "get_max_context_len", "get_n_layers", "get_vocab_size", "use_kv_cache",
    "use_sdpa_with_kv_cache", "enable_dynamic_shape", "get_num_kv_shared_layers", "get_bos_id", "get_eos_ids",
)
"""The metadata methods a program of ExecuTorch's LLM export holds (``export_llama_lib.
_load_llama_model_metadata``'s, and ``get_bos_id``, ``get_eos_ids`` ptebuild adds from the tokenizer):
names no method of a multi-method program may take."""


def _adapter_problem(adapter_checkpoint: str | None, adapter_config: str | None) -> str | None:
    if (adapter_checkpoint is None) != (adapter_config is None):
        return ("a LoRA adapter is adapter_checkpoint (adapter_model.safetensors) with adapter_config "
                "(adapter_config.json): give both")
    if adapter_checkpoint is not None and not adapter_checkpoint.endswith(".safetensors"):
        return (f"adapter_checkpoint {adapter_checkpoint!r}: ExecuTorch's LLM export reads a PEFT "
                "adapter_model.safetensors (its torchtune .pt reader needs torchtune, not installed here)")
    return None


class LlmMethod(BaseModel):
    """One method of a multi-method program (``LlmConfig.multimethod.methods``' ``MethodConfig``):
    the model, or the model with a LoRA adapter, exported as the method ``name``."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    name: Annotated[str, Field(json_schema_extra={"pattern": r"^[A-Za-z_][A-Za-z0-9_]*$", "not": {"enum": list(METADATA_METHODS)}})]
    """``MethodConfig.method_name``: the method's name in the program (an identifier, not a metadata
    method's). One method is ``forward``: ExecuTorch's ``TextLLMRunner`` generates with it."""
    adapter_checkpoint: str | None = None
    """``MethodConfig.lora_config.adapter_checkpoint``: this method's LoRA adapter (PEFT's
    ``adapter_model.safetensors``), relative to the manifest; absent: the model itself. With ``adapter_config``."""
    adapter_config: str | None = None
    """``MethodConfig.lora_config.adapter_config``: the adapter's ``adapter_config.json``, relative to the manifest."""

    @model_validator(mode="before")
    @classmethod
    def _no_export_seq_len(cls, data: object) -> object:
        if isinstance(data, dict) and "export_seq_len" in data:
            raise ValueError(
                "export_seq_len (MethodConfig.export_seq_len) is not used by ExecuTorch 1.5.1's multi-method export: "
                "every method is traced with the model's own input length (there is no prefill/decode split); remove it"
            )
        return data

    @field_validator("name")
    @classmethod
    def _method_name(cls, value: str) -> str:
        if not _IDENTIFIER.fullmatch(value):
            raise ValueError(f"method name {value!r} is not an identifier (letters, digits, _; not starting with a digit)")
        if value in METADATA_METHODS:
            raise ValueError(f"{value!r} is one of the program's metadata methods ({', '.join(METADATA_METHODS)}); "
                             "give the method another name")
        return value

    @model_validator(mode="after")
    def _adapter(self) -> Self:
        problem = _adapter_problem(self.adapter_checkpoint, self.adapter_config)
        if problem:
            raise ValueError(problem)
        return self


class LlmOptions(BackendOptions):
    """The options of a program of an ``executorch-llm`` model (every backend)."""

    dtype_override: Literal["fp32", "bf16"] = "fp32"
    """``LlmConfig.model.dtype_override``: the model's dtype."""
    use_sdpa_with_kv_cache: bool = False
    """``LlmConfig.model.use_sdpa_with_kv_cache``: ExecuTorch's custom SDPA and KV-cache update
    kernels (``llama::custom_sdpa``, ``llama::update_cache``; CPU only)."""
    qmode: Literal["int8", "8da4w", "4w"] | None = None
    """``LlmConfig.quantization.qmode``: ``8da4w`` (4-bit weights in groups, 8-bit dynamic
    activations), ``int8`` (8-bit weights), ``4w`` (4-bit weights)."""
    group_size: Annotated[int, Field(ge=1)] | None = None
    """``LlmConfig.quantization.group_size``: input features per group of quantized weights
    (``8da4w``, ``4w``); default ExecuTorch's."""
    embedding_quantize: str | None = None
    """``LlmConfig.quantization.embedding_quantize``: ``"<bits>,<group size>"``, bits 2, 4 or 8,
    group size 0 for one scale per row (``"8,0"``, ``"4,32"``)."""
    quantize_kv_cache: bool = False
    """``LlmConfig.model.quantize_kv_cache``: int8 KV cache, quantized per token."""
    adapter_checkpoint: str | None = None
    """``LlmConfig.base.lora_config.adapter_checkpoint``: a LoRA adapter's weights over the model, in
    PEFT's ``adapter_model.safetensors`` (keys ``base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight``...),
    relative to the manifest. With ``adapter_config``."""
    adapter_config: str | None = None
    """``LlmConfig.base.lora_config.adapter_config``: the adapter's ``adapter_config.json`` (PEFT's:
    ``r``, ``lora_alpha``, ``target_modules``), relative to the manifest."""
    lora_data_name: str | None = None
    """``LlmConfig.export.lora_weights_file``: the ``.ptd`` (without extension) the adapter's weights go
    to, while the model's own go to the program's ``data_name`` (``export.foundation_weights_file``),
    which programs of one model with different adapters share: one foundation file, one small file
    per adapter (XNNPACK)."""
    methods: Annotated[list[LlmMethod], Field(min_length=1)] | None = None
    """``LlmConfig.multimethod.methods``: several methods in one program, each the model or the model
    with its own LoRA adapter, exported by ExecuTorch's multi-method export (portable and XNNPACK;
    every weight in the ``.pte``, those the methods share stored once). One is ``forward``. Absent:
    the program is the one method ``forward``."""
    share_mutable_buffers: bool = False
    """``LlmConfig.multimethod.share_mutable_buffers``: the methods share one KV cache (buffers of the
    same name at the same place in memory). With ``methods``."""

    @model_validator(mode="before")
    @classmethod
    def _not_the_backend_option(cls, data: object) -> object:
        if isinstance(data, dict) and "quantize" in data and "quantize" not in cls.model_fields:
            raise ValueError(
                "quantize is the XNNPACK option of factory models; a program of an executorch-llm model "
                "takes ExecuTorch's LLM spelling: qmode = '8da4w' (with group_size) and embedding_quantize = '8,0'"
            )
        return data

    @field_validator("embedding_quantize")
    @classmethod
    def _embedding_form(cls, value: str | None) -> str | None:
        if value is not None and not _EMBEDDING.fullmatch(value):
            raise ValueError(f"{value!r} is not '<bits>,<group size>' with bits 2, 4 or 8 (e.g. '8,0' or '4,32')")
        return value

    @model_validator(mode="after")
    def _groups(self) -> Self:
        grouped = self.qmode in ("8da4w", "4w") or getattr(self, "pt2e_quantize", None) == "openvino_4wo"
        if self.group_size is not None and not grouped:
            given = f"qmode is {self.qmode!r}" if self.qmode else "no qmode"
            raise ValueError(f"group_size is for qmode '8da4w' or '4w' ({given}); remove it")
        problem = _adapter_problem(self.adapter_checkpoint, self.adapter_config)
        if problem:
            raise ValueError(problem)
        if self.share_mutable_buffers and self.methods is None:
            raise ValueError("share_mutable_buffers is for a program of several methods (methods); remove it or give methods")
        if self.lora_data_name is not None and self.adapter_checkpoint is None:
            raise ValueError("lora_data_name is where a LoRA adapter's weights go: give adapter_checkpoint and "
                             "adapter_config, or remove it")
        return self

    def files(self) -> tuple[tuple[str, str], ...]:
        """``(options key, path)`` of the files these options name (the adapter's, each method's)."""
        keys = ("adapter_checkpoint", "adapter_config")
        own = tuple((f"options.{key}", path) for key in keys if (path := getattr(self, key)) is not None)
        methods = tuple((f"options.methods[{index}].{key}", path) for index, method in enumerate(self.methods or ())
                        for key in keys if (path := getattr(method, key)) is not None)
        return own + methods


class LlmXnnpackOptions(LlmOptions):
    """Options of an ``executorch-llm`` program for XNNPACK (``LlmConfig.backend.xnnpack``)."""

    extended_ops: bool = False
    """``LlmConfig.backend.xnnpack.extended_ops``: delegate every operator XNNPACK takes, not only
    the dynamically quantized linears."""
    enable_bf16: bool = False
    """``LlmConfig.backend.xnnpack.enable_bf16``: delegate bf16 operators (the device needs XNNPACK's bf16 kernels)."""


class LlmVulkanOptions(LlmOptions):
    """Options of an ``executorch-llm`` program for Vulkan (``LlmConfig.backend.vulkan``)."""

    force_fp16: bool = False
    """``LlmConfig.backend.vulkan.force_fp16``."""


class LlmCoremlOptions(LlmOptions):
    """Options of an ``executorch-llm`` program for Core ML (``LlmConfig.backend.coreml``)."""

    ios: Literal[15, 16, 17, 18] = 15
    """``LlmConfig.backend.coreml.ios``: the oldest iOS the program runs on."""
    compute_units: Literal["cpu_only", "cpu_and_gpu", "cpu_and_ne", "all"] = "cpu_only"
    """``LlmConfig.backend.coreml.compute_units``."""
    quantize: Literal["b4w", "c4w"] | None = None
    """``LlmConfig.backend.coreml.quantize``: Core ML's own 4-bit weights."""
    enable_state: bool = False
    """``LlmConfig.backend.coreml.enable_state``: the KV cache as Core ML state (iOS 18)."""
    preserve_sdpa: bool = False
    """``LlmConfig.backend.coreml.preserve_sdpa``."""


class LlmOpenvinoOptions(LlmOptions):
    """Options of an ``executorch-llm`` program for OpenVINO (``LlmConfig.backend.openvino``)."""

    device: Literal["CPU", "GPU", "NPU"] = "CPU"
    """``LlmConfig.backend.openvino.device``."""
    pt2e_quantize: Literal["openvino_8wo", "openvino_4wo"] | None = None
    """``LlmConfig.quantization.pt2e_quantize``: NNCF's weight compression, 8-bit, or 4-bit in groups
    of ``group_size`` input features (upstream's default 128). ExecuTorch 1.5.1's LLM export for
    OpenVINO needs one (without, it fails)."""
    awq: bool = False
    """``LlmConfig.backend.openvino.openvino_awq``: NNCF's activation-aware weight quantization."""
    scale_estimation: bool = False
    """``LlmConfig.backend.openvino.openvino_scale_estimation``: NNCF's scale estimation."""


OPTIONS_BY_BACKEND: dict[str, type[LlmOptions]] = {
    "portable": LlmOptions,
    "xnnpack": LlmXnnpackOptions,
    "vulkan": LlmVulkanOptions,
    "coreml": LlmCoremlOptions,
    "openvino": LlmOpenvinoOptions,
}
"""The options model of each backend upstream's LLM export lowers for (its own switches)."""


@functools.cache
def options_model(backend_name: str) -> type[LlmOptions]:
    """The options of an ``executorch-llm`` program for ``backend_name``: upstream's LLM options,
    and for a backend ptebuild lowers it with itself (CUDA) that backend's own options and compile
    specs besides (``platform``, ``max_autotune``...)."""
    if backend_name in OPTIONS_BY_BACKEND:
        return OPTIONS_BY_BACKEND[backend_name]
    from ptebuild.backends import backend_names, get_backend

    if backend_name not in backend_names():
        return LlmOptions
    own = get_backend(backend_name).options_model
    name = f"Llm{own.__name__}"
    return type(name, (LlmOptions, own), {"__doc__": f"Options of an ``executorch-llm`` program for {backend_name}: "
                                                     f"upstream's LLM options and the {backend_name} backend's own."})


def backend_options(backend_name: str, options: LlmOptions) -> dict[str, object]:
    """The backend's own options among ``options`` (what its options model takes)."""
    from ptebuild.backends import get_backend

    fields = get_backend(backend_name).options_model.model_fields
    return {key: value for key, value in options.model_dump().items() if key in fields}
