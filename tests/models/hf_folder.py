"""Tiny Hugging Face causal LMs made here, and their logits computed as Hugging Face computes them.

:func:`make_folder` writes what ``save_pretrained`` writes for a Llama, Qwen2 or Qwen3 model:
``config.json`` and ``model.safetensors`` (random weights from a seed, in Hugging Face's key names
and layout). :func:`reference_logits` is the forward of those models written out from
transformers' modeling code (RMSNorm, rotate-half RoPE, grouped-query causal attention with
Qwen2's q/k/v biases or Qwen3's per-head q/k norms, SiLU-gated MLP, tied or own output layer), in
plain torch: what the program of the folder must compute, independent of ExecuTorch's
definitions and of ptebuild's conversion.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

DIMS = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 96, "vocab_size": 256}


LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64}
"""Llama 3.1/3.2's RoPE scaling, its original length made small enough that a head of 16 has
frequencies of all three kinds (kept, divided by the factor, smoothed between)."""


LFM2_LAYERS = ["conv", "full_attention", "conv"]
"""LFM2's hybrid stack at its smallest: a short-convolution layer on each side of an attention one."""


def config_for(model_type: str, *, tied: bool = True, rope_scaling: dict | None = None) -> dict:
    if model_type == "lfm2":
        return _lfm2_config(tied)
    config = {
        "architectures": [{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "phi3": "Phi3ForCausalLM",
                           "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "smollm3": "SmolLM3ForCausalLM"}[model_type]],
        "model_type": model_type, **DIMS, "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "max_position_embeddings": 128, "tie_word_embeddings": tied, "torch_dtype": "float32",
        "bos_token_id": 0, "eos_token_id": 1,
    }
    if model_type == "qwen3":
        config["head_dim"] = 16
    if model_type == "mistral":
        config.update(head_dim=16, sliding_window=64)  # a window no shorter than the programs' context: no effect
    if model_type == "phi3":
        # Phi-4-mini's shape of RoPE: 3/4 of each head rotated, LongRoPE factors (one per rotated pair)
        # for a context stretched from 32 to 128 positions; the programs' context stays within 32.
        config.update(partial_rotary_factor=0.75, original_max_position_embeddings=32, sliding_window=None,
                      rope_scaling={"type": "longrope", "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
                                    "long_factor": [1.5, 2.0, 3.0, 4.5, 6.0, 8.0]})
    if model_type == "smollm3":  # transformers' SmolLM3Config: no RoPE in every 4th layer
        config.update(num_hidden_layers=4, no_rope_layer_interval=4, no_rope_layers=[1, 1, 1, 0],
                      use_sliding_window=False, attention_bias=False, mlp_bias=False)
    if rope_scaling is not None:
        config["rope_scaling"] = rope_scaling
    return config


def _lfm2_config(tied: bool) -> dict:
    """transformers' ``Lfm2Config`` as LiquidAI's folders spell it: ``norm_eps``, the FFN width
    adjusted from ``intermediate_size`` (2/3 of it, times the multiplier, rounded up to
    ``block_multiple_of``: 144 -> 96 here), ``layer_types``."""
    return {
        "architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2",
        **DIMS, "num_hidden_layers": len(LFM2_LAYERS), "intermediate_size": 144,
        "block_auto_adjust_ff_dim": True, "block_ffn_dim_multiplier": 1.0, "block_multiple_of": 32,
        "layer_types": LFM2_LAYERS, "conv_L_cache": 3, "conv_bias": False, "norm_eps": 1e-5, "rope_theta": 1000000.0,
        "max_position_embeddings": 128000, "tie_word_embeddings": tied, "torch_dtype": "float32",
        "bos_token_id": 0, "eos_token_id": 1,
    }


def _lfm2_weights(config: dict, rand) -> dict[str, torch.Tensor]:
    """LFM2's keys: ``operator_norm``/``ffn_norm`` around each layer, the SwiGLU MLP as
    ``feed_forward.w1/w3/w2``, a conv layer's ``in_proj`` (B, C and x rows in one matrix), its
    depthwise ``conv.conv`` (kernel ``conv_L_cache``) and ``out_proj``; an attention layer's q/k/v,
    ``out_proj`` and per-head ``q_layernorm``/``k_layernorm``; the last norm ``embedding_norm``."""
    dim, heads, kv, hidden = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"], 96
    head_dim = dim // heads
    weights = {"model.embed_tokens.weight": rand(config["vocab_size"], dim, scale=1.0), "model.embedding_norm.weight": 1 + rand(dim)}
    for i, kind in enumerate(config["layer_types"]):
        p = f"model.layers.{i}."
        weights.update({
            p + "operator_norm.weight": 1 + rand(dim), p + "ffn_norm.weight": 1 + rand(dim),
            p + "feed_forward.w1.weight": rand(hidden, dim), p + "feed_forward.w3.weight": rand(hidden, dim),
            p + "feed_forward.w2.weight": rand(dim, hidden),
        })
        if kind == "conv":
            weights.update({p + "conv.in_proj.weight": rand(3 * dim, dim), p + "conv.conv.weight": rand(dim, 1, config["conv_L_cache"], scale=0.5),
                            p + "conv.out_proj.weight": rand(dim, dim)})
        else:
            weights.update({
                p + "self_attn.q_proj.weight": rand(heads * head_dim, dim), p + "self_attn.k_proj.weight": rand(kv * head_dim, dim),
                p + "self_attn.v_proj.weight": rand(kv * head_dim, dim), p + "self_attn.out_proj.weight": rand(dim, heads * head_dim),
                p + "self_attn.q_layernorm.weight": 1 + rand(head_dim), p + "self_attn.k_layernorm.weight": 1 + rand(head_dim),
            })
    return weights


def make_folder(folder: Path, model_type: str, seed: int, *, tied: bool = True, rope_scaling: dict | None = None) -> dict[str, torch.Tensor]:
    """Write a tiny model's ``config.json`` and ``model.safetensors``; return its weights."""
    from safetensors.torch import save_file

    config = config_for(model_type, tied=tied, rope_scaling=rope_scaling)
    dim, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim", dim // heads)
    generator = torch.Generator().manual_seed(seed)

    def rand(*shape: int, scale: float = 0.1) -> torch.Tensor:
        return torch.randn(*shape, generator=generator) * scale

    weights = {"model.embed_tokens.weight": rand(config["vocab_size"], dim, scale=1.0),
               "model.norm.weight": 1 + rand(dim)}
    if model_type == "lfm2":
        weights = _lfm2_weights(config, rand)
    for i in range(config["num_hidden_layers"] if model_type != "lfm2" else 0):
        p = f"model.layers.{i}."
        if model_type == "phi3":  # fused: q, k, v rows in one matrix; gate then up rows in another
            weights.update({
                p + "self_attn.qkv_proj.weight": rand((heads + 2 * kv) * head_dim, dim),
                p + "self_attn.o_proj.weight": rand(dim, heads * head_dim),
                p + "mlp.gate_up_proj.weight": rand(2 * config["intermediate_size"], dim),
                p + "mlp.down_proj.weight": rand(dim, config["intermediate_size"]),
                p + "input_layernorm.weight": 1 + rand(dim), p + "post_attention_layernorm.weight": 1 + rand(dim),
            })
            continue
        weights.update({
            p + "self_attn.q_proj.weight": rand(heads * head_dim, dim), p + "self_attn.k_proj.weight": rand(kv * head_dim, dim),
            p + "self_attn.v_proj.weight": rand(kv * head_dim, dim), p + "self_attn.o_proj.weight": rand(dim, heads * head_dim),
            p + "mlp.gate_proj.weight": rand(config["intermediate_size"], dim),
            p + "mlp.up_proj.weight": rand(config["intermediate_size"], dim),
            p + "mlp.down_proj.weight": rand(dim, config["intermediate_size"]),
            p + "input_layernorm.weight": 1 + rand(dim), p + "post_attention_layernorm.weight": 1 + rand(dim),
        })
        if model_type == "qwen2":
            weights.update({p + "self_attn.q_proj.bias": rand(heads * head_dim), p + "self_attn.k_proj.bias": rand(kv * head_dim),
                            p + "self_attn.v_proj.bias": rand(kv * head_dim)})
        if model_type == "qwen3":
            weights.update({p + "self_attn.q_norm.weight": 1 + rand(head_dim), p + "self_attn.k_norm.weight": 1 + rand(head_dim)})
    if not tied:
        weights["lm_head.weight"] = rand(config["vocab_size"], dim)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return weights


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.to(torch.float64)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.to(torch.float64)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def reference_logits(folder: Path, tokens: list[int]) -> torch.Tensor:
    """The logits of the last of ``tokens`` (from position 0), in float64, as transformers computes them."""
    from safetensors.torch import load_file

    config = json.loads((folder / "config.json").read_text())
    w = {k: v.to(torch.float64) for k, v in load_file(str(folder / "model.safetensors")).items()}
    if config["model_type"] == "lfm2":
        return _lfm2_logits(config, w, tokens)
    dim, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    head_dim, eps = config.get("head_dim", dim // heads), config["rms_norm_eps"]
    n = len(tokens)
    positions = torch.arange(n, dtype=torch.float64)
    rotary = int(head_dim * config.get("partial_rotary_factor", 1.0))
    inv_freq = 1.0 / (config["rope_theta"] ** (torch.arange(0, rotary, 2, dtype=torch.float64) / rotary))
    scale = 1.0
    scaling = config.get("rope_scaling") or {}
    if scaling.get("type") == "longrope":  # transformers' _compute_longrope_parameters, a sequence within the original
        original = config["original_max_position_embeddings"]
        assert n <= original
        inv_freq = inv_freq / torch.tensor(scaling["short_factor"], dtype=torch.float64)
        factor = config["max_position_embeddings"] / original
        scale = scaling.get("attention_factor") or (math.sqrt(1 + math.log(factor) / math.log(original)) if factor > 1 else 1.0)
    if scaling.get("rope_type", scaling.get("type")) == "linear":  # transformers' _compute_linear_scaling_rope_parameters
        inv_freq = inv_freq / scaling["factor"]
    if scaling.get("rope_type", scaling.get("type")) == "llama3":  # transformers' _compute_llama3_parameters
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        divided = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * divided / factor + smooth * divided
        medium = ~(wavelen < old / high) * ~(wavelen > old / low)
        inv_freq = torch.where(medium, smoothed, divided)
    angles = torch.cat([positions[:, None] * inv_freq[None, :]] * 2, dim=-1)
    cos, sin = (angles.cos() * scale)[:, None, :], (angles.sin() * scale)[:, None, :]

    def rope(x: torch.Tensor) -> torch.Tensor:
        turned, kept = x[..., :rotary], x[..., rotary:]
        return torch.cat([turned * cos + _rotate_half(turned) * sin, kept], dim=-1)

    if config["model_type"] == "phi3":  # the fused matrices, split as Phi-3's forward splits its outputs
        for i in range(config["num_hidden_layers"]):
            p = f"model.layers.{i}."
            q, k, v = w.pop(p + "self_attn.qkv_proj.weight").split([heads * head_dim, kv * head_dim, kv * head_dim])
            gate, up = w.pop(p + "mlp.gate_up_proj.weight").chunk(2)
            w.update({p + "self_attn.q_proj.weight": q, p + "self_attn.k_proj.weight": k, p + "self_attn.v_proj.weight": v,
                      p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up})
    x = w["model.embed_tokens.weight"][torch.tensor(tokens)]
    mask = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = _rms(x, w[p + "input_layernorm.weight"], eps)

        def project(name: str, count: int, h: torch.Tensor = h, p: str = p) -> torch.Tensor:
            out = h @ w[p + f"self_attn.{name}_proj.weight"].T
            if p + f"self_attn.{name}_proj.bias" in w:
                out = out + w[p + f"self_attn.{name}_proj.bias"]
            return out.view(n, count, head_dim)

        q, k, v = project("q", heads), project("k", kv), project("v", kv)
        if config["model_type"] == "qwen3":
            q, k = _rms(q, w[p + "self_attn.q_norm.weight"], eps), _rms(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(heads // kv, dim=1), v.repeat_interleave(heads // kv, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / head_dim**0.5 + mask
        attended = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(n, heads * head_dim)
        x = x + attended @ w[p + "self_attn.o_proj.weight"].T
        h = _rms(x, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    x = _rms(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return (x @ head.T)[-1]


def _lfm2_logits(config: dict, w: dict[str, torch.Tensor], tokens: list[int]) -> torch.Tensor:
    """transformers' ``Lfm2ForCausalLM`` forward (its slow path): each layer ``x + op(norm(x))``
    then ``+ w2(silu(w1 h) * w3 h)``; a conv layer splits ``in_proj``'s output into B, C and x,
    convolves ``B * x`` causally (zeros before the first token) and gates the result by C; an
    attention layer norms each head of q and k, then RoPE; the last norm is ``embedding_norm``."""
    dim, heads, kv, eps = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"], config["norm_eps"]
    head_dim, n, kernel = dim // heads, len(tokens), config["conv_L_cache"]
    inv_freq = 1.0 / (config["rope_theta"] ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.cat([torch.arange(n, dtype=torch.float64)[:, None] * inv_freq[None, :]] * 2, dim=-1)
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
    mask = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)
    x = w["model.embed_tokens.weight"][torch.tensor(tokens)]
    for i, kind in enumerate(config["layer_types"]):
        p = f"model.layers.{i}."
        h = _rms(x, w[p + "operator_norm.weight"], eps)
        if kind == "conv":
            b, c, v = (h @ w[p + "conv.in_proj.weight"].T).chunk(3, dim=-1)
            padded = torch.cat([torch.zeros(kernel - 1, dim, dtype=torch.float64), b * v]).T[None]
            convolved = torch.nn.functional.conv1d(padded, w[p + "conv.conv.weight"], groups=dim)[0].T
            out = (c * convolved) @ w[p + "conv.out_proj.weight"].T
        else:
            q = _rms((h @ w[p + "self_attn.q_proj.weight"].T).view(n, heads, head_dim), w[p + "self_attn.q_layernorm.weight"], eps)
            k = _rms((h @ w[p + "self_attn.k_proj.weight"].T).view(n, kv, head_dim), w[p + "self_attn.k_layernorm.weight"], eps)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).view(n, kv, head_dim)
            q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
            k, v = k.repeat_interleave(heads // kv, dim=1), v.repeat_interleave(heads // kv, dim=1)
            scores = torch.einsum("qhd,khd->hqk", q, k) / head_dim**0.5 + mask
            out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(n, dim) @ w[p + "self_attn.out_proj.weight"].T
        x = x + out
        h = _rms(x, w[p + "ffn_norm.weight"], eps)
        x = x + (torch.nn.functional.silu(h @ w[p + "feed_forward.w1.weight"].T) * (h @ w[p + "feed_forward.w3.weight"].T)) @ w[p + "feed_forward.w2.weight"].T
    x = _rms(x, w["model.embedding_norm.weight"], eps)
    return (x @ w.get("lm_head.weight", w["model.embed_tokens.weight"]).T)[-1]
