"""A Hugging Face causal LM saved in a local folder, taken into ExecuTorch's LLM export.

A model table's ``huggingface = "FOLDER"`` names a folder as ``save_pretrained`` writes it:
``config.json`` and the weights in ``model.safetensors`` (or shards listed by
``model.safetensors.index.json``). Nothing is downloaded. It goes the way ExecuTorch's own
pipeline takes a Hugging Face checkpoint (``export_llama_lib``: ``download_and_convert_hf_checkpoint``
then the ``LlmConfig`` export), less the download:

1. :func:`read_folder` (in the builder: JSON and the safetensors headers only) maps ``config.json``
   to a params JSON of ExecuTorch's ``ModelArgs``, field by field as ExecuTorch's committed params
   files spell the same models (``examples/models/qwen3/config/0_6b_config.json``,
   ``qwen2_5/config/0_5b_config.json``): ``use_hf_rope`` (the weights stay in Hugging Face's
   layout, RoPE applied as Hugging Face applies it), ``attention_qkv_bias`` (Qwen2),
   ``use_qk_norm`` and ``qk_norm_before_rope`` (Qwen3), ``partial_rotary_factor`` and LongRoPE's
   factors (Phi-3, as ExecuTorch's ``phi_4_mini`` takes them), ``layer_types``, the FFN width as
   transformers adjusts it and q/k norms (LFM2, as ``lfm2/config/lfm2_350m_config.json``: model_class
   ``lfm2_350m``), Llama's for a SmolLM3 whose layers all rotate; Llama 3.1/3.2's ``llama3`` and the
   ``linear`` RoPE scalings as one such factor per frequency; the ``dynamic`` one as plain RoPE
   where the context is within ``max_position_embeddings`` (it scales only past it). Mistral is Llama's definition where
   its sliding window is no shorter than the program's context (then it never leaves a key out).
   What ExecuTorch's definitions do not compute (another activation, biases on the output or MLP
   projections, a RoPE scaling other than those, a sliding window shorter than the
   context, LongRoPE's switch to its long factors within the context, untied output weights that
   the folder lacks) is refused with one line, and so is each family for which ExecuTorch 1.5.1
   ships a converter but its LLM export has no definition (:data:`REFUSED`; those converters feed
   Qualcomm's static Llama): Gemma 3, Granite, SmolLM3 with NoPE layers; Qwen3.5, which upstream
   defines, is not mapped here yet (its line names upstream's params file and converter).
2. :func:`convert` (in the worker) writes that params JSON and converts the weights with
   ExecuTorch's own converter for the layout into a checkpoint of ExecuTorch's layout:
   ``examples/models/qwen3/convert_weights.py`` for ``qwen3``, ``llama`` and ``mistral`` (Hugging
   Face's Llama and Mistral keys are Qwen3's without the q/k norms: the same map),
   ``examples/models/qwen2_5/convert_weights.py`` for ``qwen2`` (its q/k/v biases),
   ``examples/models/phi_4_mini/convert_weights.py``'s ``phi_4_hf_to_meta`` for ``phi3`` (it splits
   the fused ``qkv_proj`` and ``gate_up_proj``; its ``convert_weights`` reads only two named shards
   through torchtune, so the folder is read by qwen3's loader, and a tied output layer is the
   embedding, as qwen3's converter writes it), ``examples/models/lfm2/convert_weights.py``'s
   ``lfm_2_to_meta`` for ``lfm2`` (it splits each conv layer's ``in_proj`` into B, C and x; its own
   loader reads no shards, so qwen3's reads the folder, and an own output layer it leaves as
   ``lm_head.weight`` is renamed ``output.weight``), ``examples/models/smollm3/convert_weights.py``
   for ``smollm3``. Upstream's converter reads the folder once and writes
   the checkpoint; the export then maps it (``torch.load(mmap=True)``): one copy of the weights in
   memory at a time.

ExecuTorch 1.5.1's ``qwen2_5`` and ``phi_4_mini`` converters import torchtune at their top (not
installed: nothing else here needs it, and neither converter calls it on a safetensors folder);
:func:`_upstream_module` imports them with stand-ins for those names: ExecuTorch's own copy of
``get_mapped_key`` (``examples/models/checkpoint.py``) for qwen2_5's.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIG = "config.json"
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"

MODEL_TYPES = {"lfm2": "lfm2_350m", "llama": "llama3", "mistral": "llama3", "phi3": "phi_4_mini", "qwen2": "qwen2_5_0_5b",
               "qwen3": "qwen3_0_6b", "smollm3": "llama3"}
"""Hugging Face ``model_type`` -> the ``LlmConfig.base.model_class`` it is exported as (ExecuTorch's
definition of that family; the class only names it: the params JSON says what it computes)."""

_QUALCOMM = "Qualcomm's static Llama (examples/qualcomm/oss_scripts/llama, QNN only)"
REFUSED = {
    "gemma3_text": "ExecuTorch 1.5.1's LLM export has no Gemma 3 definition (LlmConfig.base.model_class has none, and its "
                   "Llama definition never applies the ModelArgs fields Gemma 3 needs: post_attention_norm, post_ffn_norm, "
                   "embedding_scale_factor, attention_multiplier, local_rope_theta); its "
                   f"examples/models/gemma3/convert_weights.py converts for {_QUALCOMM}",
    "granite": "ExecuTorch 1.5.1's LLM export has no Granite definition (LlmConfig.base.model_class has none, and its Llama "
               "definition never applies the ModelArgs fields Granite needs: embedding_scale_factor, attention_multiplier, "
               f"residual_multiplier, logits_scaling); its examples/models/granite/convert_weights.py converts for {_QUALCOMM}",
    "qwen3_5": "ptebuild does not map Qwen3.5's config (gated DeltaNet layers) to ExecuTorch's params yet: give params "
               "(ExecuTorch's examples/models/qwen3_5/config/0_8b_config.json, in its repository, not in the wheel) and a "
               "checkpoint made by examples/models/qwen3_5/convert_weights.py, with model_class qwen3_5_0_8b",
}
"""Hugging Face ``model_type``s that ExecuTorch ships a converter for and that are refused: why, in one clause."""
REFUSED["gemma3"] = REFUSED["gemma3_text"]
REFUSED["qwen3_5_text"] = REFUSED["qwen3_5"]


class FolderProblem(ValueError):
    """Why a folder cannot be taken (one line, without the location)."""


@dataclass(frozen=True)
class HuggingFaceModel:
    """A folder read in the builder: what it computes as ExecuTorch's params, and its files."""

    model_type: str
    params: dict[str, Any]
    files: tuple[str, ...]
    """``config.json``, the index if sharded, then the safetensors files: names inside the folder."""
    eos_ids: tuple[int, ...] = ()
    """``config.json``'s ``eos_token_id`` (an id or a list: Llama 3 Instruct's three, Qwen's two), ids
    the runner stops at besides the tokenizer's EOS (``get_eos_ids``)."""

    @property
    def model_class(self) -> str:
        return MODEL_TYPES[self.model_type]


UNTIED_BY_DEFAULT = ("llama", "mistral", "phi3")
"""The families whose transformers config defaults ``tie_word_embeddings`` to false."""
SLIDING_WINDOW = ("mistral", "phi3")
"""The families whose attention honours ``sliding_window`` whenever it is set (Qwen2's only with
``use_sliding_window``)."""


def _rope(config: dict[str, Any]) -> tuple[float, str, dict[str, Any]]:
    """``(theta, rope type, its parameters)`` of a config, in the spelling of transformers 4
    (``rope_theta``, ``rope_scaling``) or 5 (``rope_parameters``)."""
    parameters = config.get("rope_parameters")
    if isinstance(parameters, dict):
        kind = str(parameters.get("rope_type", parameters.get("type", "default")))
        return float(parameters.get("rope_theta", config.get("rope_theta", 10000.0))), kind, parameters
    scaling = config.get("rope_scaling")
    if isinstance(scaling, dict):
        return float(config.get("rope_theta", 10000.0)), str(scaling.get("rope_type", scaling.get("type", "default"))), scaling
    return float(config.get("rope_theta", 10000.0)), "default", {}


PER_FREQUENCY = ("linear", "llama3")
"""transformers' RoPE scalings that divide each frequency by a factor of its own, whatever the
sequence: ExecuTorch's Hugging Face RoPE takes such factors (LongRoPE's ``short_factor``)."""


def _per_frequency(kind: str, scaling: dict[str, Any], theta: float, rotated: int) -> dict[str, Any]:
    """ExecuTorch's params for a ``linear`` or ``llama3`` RoPE scaling: each frequency's factor
    (its unscaled value over its scaled one, as transformers' ``_compute_linear_scaling_rope_parameters``
    and ``_compute_llama3_parameters`` scale it), attention unscaled."""
    import math

    def number(key: str) -> float:
        value = scaling.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise FolderProblem(f"{CONFIG}'s RoPE scaling ({kind!r}) has no {key} above 0")
        return float(value)

    factor = number("factor")
    frequencies = [theta ** (-(2 * i) / rotated) for i in range(rotated // 2)]
    if kind == "linear":
        return {"rope_scaling_short_factor": [factor] * len(frequencies), "rope_scaling_attention_factor": 1.0}
    low, high, original = number("low_freq_factor"), number("high_freq_factor"), number("original_max_position_embeddings")
    if high <= low:
        raise FolderProblem(f"{CONFIG}'s RoPE scaling ({kind!r}) needs high_freq_factor above low_freq_factor ({high} and {low})")
    factors = []
    for frequency in frequencies:
        wavelength = 2 * math.pi / frequency
        if wavelength < original / high:
            scaled = frequency
        elif wavelength > original / low:
            scaled = frequency / factor
        else:
            smooth = (original / wavelength - low) / (high - low)
            scaled = (1 - smooth) * frequency / factor + smooth * frequency
        factors.append(frequency / scaled)
    return {"rope_scaling_short_factor": factors, "rope_scaling_attention_factor": 1.0}


def _longrope(config: dict[str, Any], scaling: dict[str, Any], head_dim: int, context: int | None) -> dict[str, Any]:
    """ExecuTorch's params for Phi-3's LongRoPE, as transformers computes it
    (``_compute_longrope_parameters``) for every sequence the program can see. transformers takes
    the short factors while the sequence is within ``original_max_position_embeddings`` and the long
    ones past it; ExecuTorch's table takes one set for all positions: only a context within the
    original length is taken (short factors). The attention factor (cos and sin scaled) is the
    config's, else transformers' ``sqrt(1 + ln(stretch) / ln(original))``."""
    import math

    original = config.get("original_max_position_embeddings", scaling.get("original_max_position_embeddings"))
    if isinstance(original, int):
        stretch = float(config.get("max_position_embeddings", original)) / original
    else:
        original = int(config.get("max_position_embeddings", 0)) or None
        stretch = float(scaling.get("factor") or 1.0)
    if original is None:
        raise FolderProblem(f"{CONFIG}'s LongRoPE has no original_max_position_embeddings (nor max_position_embeddings)")
    if context is None or context > original:
        raise FolderProblem(
            f"{CONFIG}'s LongRoPE (rope_scaling) switches to its long factors past original_max_position_embeddings "
            f"({original}), and ExecuTorch's table takes one set for every position; set max_context_length to at most {original}"
        )
    short = scaling.get("short_factor")
    rotated = int(head_dim * float(config.get("partial_rotary_factor", scaling.get("partial_rotary_factor", 1.0))))
    if not isinstance(short, list) or len(short) != rotated // 2:
        count = len(short) if isinstance(short, list) else 0
        raise FolderProblem(
            f"{CONFIG}'s LongRoPE has {count} short factors; the rotated part of a head ({rotated} of {head_dim}) takes {rotated // 2}"
        )
    attention = scaling.get("attention_factor")
    if attention is None:
        attention = math.sqrt(1 + math.log(stretch) / math.log(original)) if stretch > 1.0 else 1.0
    return {"rope_scaling_short_factor": [float(f) for f in short], "rope_scaling_attention_factor": float(attention)}


def params_from_config(config: dict[str, Any], weights: frozenset[str], context: int | None = None) -> dict[str, Any]:
    """ExecuTorch ``ModelArgs`` params for a Hugging Face ``config.json`` (its keys of ``weights``
    tell whether the output layer is its own) in a program whose KV cache holds ``context``
    positions (None: not known, so a sliding window or LongRoPE is refused). Raises FolderProblem."""
    model_type = config.get("model_type")
    if model_type in REFUSED:
        raise FolderProblem(f"{CONFIG} has model_type {model_type!r}; {REFUSED[model_type]}")
    if model_type not in MODEL_TYPES:
        raise FolderProblem(
            f"{CONFIG} has model_type {model_type!r}; ExecuTorch's definitions take {', '.join(sorted(MODEL_TYPES))} "
            "from a Hugging Face folder (use params and checkpoint for the others)"
        )
    if model_type == "lfm2":
        return _lfm2_params(config, weights)
    if model_type == "smollm3":
        _smollm3_fits(config, weights)
    missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
               if not isinstance(config.get(k), int)]
    if missing:
        raise FolderProblem(f"{CONFIG} lacks {', '.join(missing)} (integers): it is not a causal LM's config")
    activation = config.get("hidden_act", "silu")
    if activation != "silu":
        raise FolderProblem(f"{CONFIG} has hidden_act {activation!r}; ExecuTorch's {model_type} definition computes silu")
    for key in ("mlp_bias",) if model_type == "qwen2" else ("mlp_bias", "attention_bias"):
        if config.get(key):
            raise FolderProblem(f"{CONFIG} has {key} = true; ExecuTorch's {model_type} definition has no such biases")
    if config.get("use_sliding_window"):
        raise FolderProblem(f"{CONFIG} has use_sliding_window = true; ExecuTorch's {model_type} definition attends to the whole context")
    window = config.get("sliding_window") if model_type in SLIDING_WINDOW else None
    if isinstance(window, int) and (context is None or context > window):
        raise FolderProblem(
            f"{CONFIG} has sliding_window {window}, shorter than the context (max_context_length {context}): each token "
            f"would see only the last {window}, and ExecuTorch's {MODEL_TYPES[model_type]} definition attends to the whole "
            f"context; set max_context_length to at most {window}"
        )
    theta, rope_type, scaling = _rope(config)
    # transformers 4 spells it at the top of the config, 5 among the RoPE parameters
    partial = float(config.get("partial_rotary_factor", scaling.get("partial_rotary_factor", 1.0)))
    if partial != 1.0 and model_type != "phi3":
        raise FolderProblem(f"{CONFIG} has partial_rotary_factor {partial:g}; ExecuTorch's {model_type} definition rotates whole heads")
    if rope_type == "dynamic":  # transformers' dynamic NTK: RoPE's base grows only past max_position_embeddings
        longest = config.get("max_position_embeddings")
        if not isinstance(longest, int) or context is None or context > longest:
            raise FolderProblem(
                f"{CONFIG}'s dynamic RoPE ('dynamic') changes RoPE's base past max_position_embeddings ({longest}); "
                f"set max_context_length to at most {longest}"
            )
        rope_type = "default"
    if rope_type not in ("default", *PER_FREQUENCY) and not (rope_type == "longrope" and model_type == "phi3"):
        raise FolderProblem(
            f"{CONFIG} scales RoPE ({rope_type!r}); ExecuTorch's Hugging Face RoPE (use_hf_rope) computes it unscaled"
        )
    tied = bool(config.get("tie_word_embeddings", model_type not in UNTIED_BY_DEFAULT))
    if not tied and "lm_head.weight" not in weights:
        raise FolderProblem(f"{CONFIG} has tie_word_embeddings = false, and the weights have no lm_head.weight")
    heads = config["num_attention_heads"]
    params: dict[str, Any] = {
        "dim": config["hidden_size"],
        "n_layers": config["num_hidden_layers"],
        "n_heads": heads,
        "n_kv_heads": config.get("num_key_value_heads") or heads,
        "hidden_dim": config["intermediate_size"],
        "ffn_dim_multiplier": 1,
        "vocab_size": config["vocab_size"],
        "norm_eps": float(config.get("rms_norm_eps", 1e-6)),
        "rope_theta": theta,
        "use_scaled_rope": False,
        "use_hf_rope": True,
        "attention_qkv_bias": model_type == "qwen2",
    }
    head_dim = config.get("head_dim")
    if isinstance(head_dim, int) and head_dim != config["hidden_size"] // heads:
        params["head_dim"] = head_dim
    if model_type == "qwen3":
        params.update(head_dim=head_dim or config["hidden_size"] // heads, use_qk_norm=True, qk_norm_before_rope=True)
    if partial != 1.0:
        params["partial_rotary_factor"] = partial
    whole_head = head_dim if isinstance(head_dim, int) else config["hidden_size"] // heads
    if rope_type == "longrope":
        params.update(_longrope(config, scaling, whole_head, context))
    if rope_type in PER_FREQUENCY:
        params.update(_per_frequency(rope_type, scaling, theta, int(whole_head * partial)))
    return params


def _smollm3_fits(config: dict[str, Any], weights: frozenset[str]) -> None:
    """Refuse a SmolLM3 whose layers leave RoPE out (transformers' ``no_rope_layers``, else every
    ``no_rope_layer_interval``-th layer): ExecuTorch's Llama definition rotates in every layer. One
    that rotates in all is Llama's computation; upstream's converter writes the embedding as the
    output layer, so it takes only a tied one."""
    layers = config["num_hidden_layers"]
    flags = config.get("no_rope_layers")
    if not isinstance(flags, list):
        interval = config.get("no_rope_layer_interval", 4)
        flags = [int((i + 1) % interval != 0) for i in range(layers)] if isinstance(interval, int) and interval > 0 else [1] * layers
    nope = [i for i, flag in enumerate(flags) if not flag]
    if nope:
        raise FolderProblem(
            f"{CONFIG} has model_type 'smollm3', which leaves RoPE out of layer{'s' if len(nope) > 1 else ''} "
            f"{', '.join(map(str, nope))} (no_rope_layers); "
            "ExecuTorch 1.5.1's Llama definition rotates in every layer (ModelArgs.no_rope_layer_interval is read only by "
            f"{_QUALCOMM}, for which examples/models/smollm3/convert_weights.py converts) and LlmConfig has no SmolLM3 class"
        )
    if not config.get("tie_word_embeddings", True) or "lm_head.weight" in weights:
        raise FolderProblem(f"{CONFIG} has tie_word_embeddings = false; ExecuTorch's smollm3 converter writes the embedding as the output layer")


LFM2_LAYER_TYPES = ("conv", "full_attention")


def _lfm2_params(config: dict[str, Any], weights: frozenset[str]) -> dict[str, Any]:
    """ExecuTorch's params for LFM2, as its ``examples/models/lfm2/config/lfm2_350m_config.json``
    spells them: the FFN width as transformers' ``Lfm2MLP`` adjusts it, ``layer_types`` (from
    ``full_attn_idxs`` where absent, as ``Lfm2Config`` makes it), q/k norms before RoPE. ExecuTorch's
    ``ShortConvBlock`` has a kernel of 3 and no bias."""
    layers, dim = config["num_hidden_layers"], config["hidden_size"]
    hidden = config.get("block_ff_dim", config["intermediate_size"])
    if config.get("block_auto_adjust_ff_dim", True):
        hidden = int(2 * hidden / 3)
        multiplier, multiple = config.get("block_ffn_dim_multiplier", 1.0), int(config.get("block_multiple_of", 256))
        if multiplier is not None:
            hidden = multiple * ((int(multiplier * hidden) + multiple - 1) // multiple)
    kinds = config.get("layer_types")
    if kinds is None:
        attention = config.get("full_attn_idxs") or range(layers)
        kinds = ["full_attention" if i in attention else "conv" for i in range(layers)]
    if not isinstance(kinds, list) or len(kinds) != layers or any(k not in LFM2_LAYER_TYPES for k in kinds):
        raise FolderProblem(f"{CONFIG} has layer_types {kinds!r}; LFM2 takes {layers} of {', '.join(LFM2_LAYER_TYPES)}")
    if config.get("conv_L_cache", 3) != 3 or config.get("conv_bias"):
        raise FolderProblem(
            f"{CONFIG} has conv_L_cache {config.get('conv_L_cache')} and conv_bias {bool(config.get('conv_bias'))}; "
            "ExecuTorch's lfm2 ShortConvBlock convolves over 3 positions without a bias"
        )
    tied = bool(config.get("tie_word_embeddings", config.get("tie_embedding", True)))
    if not tied and "lm_head.weight" not in weights:
        raise FolderProblem(f"{CONFIG} has tie_word_embeddings = false, and the weights have no lm_head.weight")
    theta, rope_type, _ = _rope(config)
    if rope_type != "default":
        raise FolderProblem(f"{CONFIG} scales RoPE ({rope_type!r}); ExecuTorch's lfm2 definition computes it unscaled")
    heads = config["num_attention_heads"]
    return {
        "dim": dim, "ffn_dim_multiplier": 1, "hidden_dim": hidden, "n_heads": heads,
        "n_kv_heads": config.get("num_key_value_heads") or heads, "n_layers": layers,
        "norm_eps": float(config.get("norm_eps", 1e-5)), "rope_theta": theta, "use_scaled_rope": False,
        "vocab_size": config["vocab_size"], "use_hf_rope": True, "use_qk_norm": True, "qk_norm_before_rope": True,
        "layer_types": list(kinds),
    }


def safetensors_keys(path: Path) -> frozenset[str]:
    """The tensor names in a safetensors file's header (its first 8 bytes give the header's length)."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise FolderProblem(f"{path.name} is not a safetensors file (shorter than its header)")
        (length,) = struct.unpack("<Q", head)
        if length > 100 * 2**20:
            raise FolderProblem(f"{path.name} is not a safetensors file (a header of {length} bytes)")
        try:
            header = json.loads(f.read(length))
        except ValueError:
            raise FolderProblem(f"{path.name} is not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise FolderProblem(f"{path.name} is not a safetensors file (its header is not an object)")
    return frozenset(k for k in header if k != "__metadata__")


def read_folder(folder: Path, context: int | None) -> HuggingFaceModel:
    """Read ``folder``'s config and weight names (no tensor data), for a program whose KV cache
    holds ``context`` positions (:func:`params_from_config`). Raises FolderProblem."""
    from ptebuild.path_problems import file_problem

    if not folder.is_dir():
        raise FolderProblem("no such folder" if not folder.exists() else "it is a file, not a folder")
    problem = file_problem(folder / CONFIG)
    if problem:
        raise FolderProblem(f"{CONFIG}: {problem} (a Hugging Face model folder has config.json and model.safetensors)")
    try:
        config = json.loads((folder / CONFIG).read_text())
    except (OSError, ValueError) as exc:
        raise FolderProblem(f"{CONFIG} is not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise FolderProblem(f"{CONFIG} is not a JSON object")
    if (folder / INDEX).is_file():
        try:
            weight_map = json.loads((folder / INDEX).read_text())["weight_map"]
            shards = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise FolderProblem(f"{INDEX} has no weight_map of tensor name to file: {exc}") from None
        files = (CONFIG, INDEX, *shards)
        names = frozenset(weight_map)
    else:
        shards = [SINGLE]
        files = (CONFIG, SINGLE)
        names = frozenset()
    for shard in shards:
        problem = file_problem(folder / shard)
        if problem:
            raise FolderProblem(f"{shard}: {problem} (the weights in safetensors: save_pretrained's model.safetensors)")
        if not (folder / INDEX).is_file():
            names = safetensors_keys(folder / shard)
    params = params_from_config(config, names, context)
    return HuggingFaceModel(str(config["model_type"]), params, files, config_eos_ids(config))


def config_eos_ids(config: dict[str, Any]) -> tuple[int, ...]:
    """``config``'s ``eos_token_id`` as a tuple of ids (absent, null or not ids: none)."""
    value = config.get("eos_token_id")
    ids = value if isinstance(value, list) else [value]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        return ()
    return tuple(dict.fromkeys(ids))


def convert(folder: Path, model: HuggingFaceModel, scratch: Path) -> tuple[Path, Path]:
    """Write the params JSON and the weights in ExecuTorch's layout (upstream's converter) into
    ``scratch``: returns ``(params, checkpoint)``."""
    import contextlib
    import sys

    params = scratch / "huggingface_params.json"
    params.write_text(json.dumps(model.params, sort_keys=True))
    checkpoint = scratch / "huggingface_weights.pth"
    converter = {"qwen2": _qwen2_converter, "phi3": _phi3_converter, "lfm2": _lfm2_converter,
                 "smollm3": _smollm3_converter}.get(model.model_type, _qwen3_converter)()
    with contextlib.redirect_stdout(sys.stderr):  # upstream prints its progress
        converter(str(folder), str(checkpoint))
    return params, checkpoint


def _qwen3_converter() -> Any:
    from executorch.examples.models.qwen3.convert_weights import convert_weights

    return convert_weights


def _qwen2_converter() -> Any:
    from executorch.examples.models.checkpoint import get_mapped_key

    stand_ins = {"torchtune": {}, "torchtune.models": {}, "torchtune.models.convert_weights": {"get_mapped_key": get_mapped_key}}
    return _upstream_module("executorch.examples.models.qwen2_5.convert_weights", stand_ins).convert_weights


def _phi3_converter() -> Any:
    """Upstream's Phi-3 mapping (``phi_4_hf_to_meta``) over the folder as qwen3's loader reads it."""
    stand_ins = {"torchtune": {}, "torchtune.training": {"FullModelHFCheckpointer": None}}
    phi = _upstream_module("executorch.examples.models.phi_4_mini.convert_weights", stand_ins)

    def convert_weights(input_dir: str, output_file: str) -> None:
        import torch
        from executorch.examples.models.qwen3.convert_weights import load_checkpoint_from_safetensors

        state = load_checkpoint_from_safetensors(input_dir)
        tied = "lm_head.weight" not in state
        converted = phi.phi_4_hf_to_meta(state)
        del state
        if tied:
            converted["output.weight"] = converted["tok_embeddings.weight"]
        torch.save(converted, output_file)

    return convert_weights


def _smollm3_converter() -> Any:
    from executorch.examples.models.smollm3.convert_weights import convert_weights

    return convert_weights


def _lfm2_converter() -> Any:
    """Upstream's LFM2 mapping (``lfm_2_to_meta``: ``in_proj`` split into B, C and x) over the folder
    as qwen3's loader reads it (upstream's reads only ``model.safetensors``, not shards); an own
    output layer, which upstream leaves as ``lm_head.weight``, is named ``output.weight``."""
    from executorch.examples.models.lfm2.convert_weights import lfm_2_to_meta

    def convert_weights(input_dir: str, output_file: str) -> None:
        import torch
        from executorch.examples.models.qwen3.convert_weights import load_checkpoint_from_safetensors

        converted = lfm_2_to_meta(load_checkpoint_from_safetensors(input_dir))
        if "lm_head.weight" in converted:
            converted["output.weight"] = converted.pop("lm_head.weight")
        torch.save(converted, output_file)

    return convert_weights


def _upstream_module(name: str, stand_ins: dict[str, dict[str, Any]]) -> Any:
    """Import upstream's module ``name``; if it needs a module that is not installed, import it
    with ``stand_ins`` (module name -> its attributes) in place of those, for the import only."""
    import importlib
    import sys
    import types

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if not any((exc.name or "").startswith(missing) for missing in stand_ins):
            raise
    saved = {missing: sys.modules.get(missing) for missing in stand_ins}
    for missing, attributes in stand_ins.items():
        module = types.ModuleType(missing)
        for attribute, value in attributes.items():
            setattr(module, attribute, value)
        sys.modules[missing] = module
    try:
        return importlib.import_module(name)
    finally:
        for missing, before in saved.items():
            if before is None:
                sys.modules.pop(missing, None)
            else:
                sys.modules[missing] = before
