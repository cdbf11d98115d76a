"""Hugging Face causal LMs in a local folder (``huggingface = "FOLDER"``): config.json mapped to
ExecuTorch's params, the weights converted by ExecuTorch's own converter, exported by its LLM
export, checked by generation; the program's logits against Hugging Face's forward written out in
plain torch (:mod:`hf_folder`), so the conversion itself is checked too."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from helpers import ptebuild
from hf_folder import LFM2_LAYERS, LLAMA3_ROPE, config_for, make_folder, reference_logits

from ptebuild.models.executorch_llm.huggingface import FolderProblem, params_from_config

ROOT = Path(__file__).resolve().parents[2]
TIED_WEIGHTS = frozenset({"model.embed_tokens.weight"})
PHI3_WEIGHTS = frozenset({"model.embed_tokens.weight", "model.layers.0.self_attn.qkv_proj.weight"})

MANIFEST = """
[defaults]
out = "out"

[models.hf]
kind = "executorch-llm"
huggingface = "hf"
tokenizer = "tokenizer.json"
max_seq_length = 32
seed = 3

[programs.hf_xnnpack]
model = "hf"
backend = "xnnpack"
data_name = "hf_xnnpack_weights"
options = { use_sdpa_with_kv_cache = true }
"""


def _project(root: Path, model_type: str, *, tied: bool = True, manifest: str = MANIFEST, rope_scaling: dict | None = None) -> Path:
    make_folder(root / "hf", model_type, seed=3, tied=tied, rope_scaling=rope_scaling)
    shutil.copy(ROOT / "manifests" / "chat" / "tokenizer.json", root / "tokenizer.json")
    (root / "hf.toml").write_text(manifest)
    return root / "hf.toml"


def _program_logits(out: Path, tokens: list[int]):
    import torch

    from ptebuild.models.executorch_llm.native_output import register_llm_kernels
    from ptebuild.runtime import load

    register_llm_kernels()
    program = load(out / "hf_xnnpack.pte", [out / "hf_xnnpack_weights.ptd"])
    logits = program.run("forward", [torch.tensor([tokens]), torch.tensor([0])])[0]
    return logits.to(torch.float64).reshape(-1)


def _build_and_compare(tmp_path: Path, model_type: str, tied: bool, rope_scaling: dict | None = None, change: dict | None = None) -> dict:
    manifest = _project(tmp_path / "project", model_type, tied=tied, rope_scaling=rope_scaling)
    if change:
        config = manifest.parent / "hf" / "config.json"
        config.write_text(json.dumps({**json.loads(config.read_text()), **change}))
    done = ptebuild("build", manifest, "--cache", tmp_path / "cache", "--json")
    assert done.returncode == 0, done.stderr
    program = json.loads(done.stdout)["targets"][0]
    assert program["status"] == "built" and program["check"] == "executorch-llm-generation"
    assert program["figures"][1]["tokens_agreed"] == 16 and program["figures"][1]["runner_tokens"] >= 1
    tokens = [5, 17, 200, 33, 4, 99, 128]
    expected = reference_logits(manifest.parent / "hf", tokens)
    actual = _program_logits(manifest.parent / "out", tokens)
    error = float((actual - expected).abs().max())
    print(model_type, "max abs error against Hugging Face's forward:", error, "of logits up to", float(expected.abs().max()))
    assert error <= 1e-3
    return program


# Slow: a Hugging Face folder built end to end (20 s); the default run keeps its fast siblings: the config and weights mapping, the located errors and the key below.
@pytest.mark.slow
def test_a_hugging_face_llama_folder_builds_and_computes_what_transformers_computes(tmp_path):
    program = _build_and_compare(tmp_path, "llama", tied=True)
    assert {Path(o["path"]).name for o in program["outputs"]} == {"hf_xnnpack.pte", "hf_xnnpack_weights.ptd", "hf_xnnpack.tokenizer.json"}


@pytest.mark.slow
@pytest.mark.parametrize("model_type,tied", [("qwen2", False), ("qwen3", True), ("mistral", False), ("phi3", True)])
def test_qwen2_qwen3_mistral_and_phi3_folders(tmp_path, model_type, tied):
    """Qwen2: q/k/v biases and its own output layer (upstream's qwen2_5 converter); Qwen3: per-head
    q/k norms (upstream's qwen3 converter); Mistral: Llama's layout with a sliding window no shorter
    than the context; Phi-3: fused q/k/v and gate/up weights (upstream's phi_4_mini mapping), 3/4 of
    each head rotated, LongRoPE's short factors and attention factor."""
    _build_and_compare(tmp_path, model_type, tied)


@pytest.mark.slow
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "own_output"])
def test_an_lfm2_folder(tmp_path, tied):
    """LFM2: short-convolution layers around an attention one (upstream's lfm2 converter splits
    each in_proj into B, C and x), per-head q/k norms, its FFN width as transformers adjusts it."""
    _build_and_compare(tmp_path, "lfm2", tied)


@pytest.mark.slow
def test_a_smollm3_folder_that_rotates_in_every_layer(tmp_path):
    """SmolLM3's layout and upstream's smollm3 converter, where no layer leaves RoPE out (the only
    SmolLM3 that ExecuTorch's Llama definition computes)."""
    _build_and_compare(tmp_path, "smollm3", True, change={"no_rope_layers": [1, 1, 1, 1]})


@pytest.mark.slow
@pytest.mark.parametrize("rope_scaling", [LLAMA3_ROPE, {"rope_type": "linear", "factor": 4.0}], ids=["llama3", "linear"])
def test_a_llama_folder_with_scaled_rope(tmp_path, rope_scaling):
    """Llama 3.1/3.2's RoPE scaling (and the linear one): each frequency divided by a factor of its
    own, as transformers computes them."""
    _build_and_compare(tmp_path, "llama", True, rope_scaling)


def test_params_as_executorchs_own_files_spell_them():
    assert params_from_config(config_for("qwen3"), TIED_WEIGHTS) == {
        "dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "hidden_dim": 96, "ffn_dim_multiplier": 1,
        "vocab_size": 256, "norm_eps": 1e-6, "rope_theta": 10000.0, "use_scaled_rope": False, "use_hf_rope": True,
        "attention_qkv_bias": False, "head_dim": 16, "use_qk_norm": True, "qk_norm_before_rope": True,
    }
    qwen2 = params_from_config(config_for("qwen2", tied=False), TIED_WEIGHTS | {"lm_head.weight"})
    assert qwen2["attention_qkv_bias"] is True and "use_qk_norm" not in qwen2
    # transformers 5 spells RoPE as rope_parameters
    config = {**config_for("llama"), "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}
    del config["rope_theta"]
    assert params_from_config(config, TIED_WEIGHTS)["rope_theta"] == 500000.0


def test_scaled_rope_as_a_factor_per_frequency():
    """transformers' llama3 and linear RoPE scalings divide each frequency by a factor of its own:
    ExecuTorch's Hugging Face RoPE takes such factors (LongRoPE's short factors), attention unscaled."""
    params = params_from_config(config_for("llama", rope_scaling=LLAMA3_ROPE), TIED_WEIGHTS, context=32)
    factors = params["rope_scaling_short_factor"]
    # head 16, theta 1e4: wavelengths 6.3 19.9 62.8 199 628 1987 6283 19869 against 64/4 and 64/1
    assert factors[0] == 1.0 and factors[3:] == [8.0] * 5
    assert 1.0 < factors[1] < factors[2] < 8.0
    assert params["rope_scaling_attention_factor"] == 1.0 and params["use_hf_rope"] is True
    linear = params_from_config(config_for("llama", rope_scaling={"type": "linear", "factor": 4.0}), TIED_WEIGHTS, context=32)
    assert linear["rope_scaling_short_factor"] == [4.0] * 8


def test_dynamic_rope_within_the_original_length_is_unscaled():
    """transformers' dynamic NTK scaling changes RoPE's base only for a sequence past
    max_position_embeddings (128 here): a program whose context stays within computes plain RoPE."""
    dynamic = {**config_for("llama"), "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}
    assert params_from_config(dynamic, TIED_WEIGHTS, context=128) == params_from_config(config_for("llama"), TIED_WEIGHTS, context=128)
    with pytest.raises(FolderProblem, match=r"config.json's dynamic RoPE \('dynamic'\) changes RoPE's base past "
                                            r"max_position_embeddings \(128\); set max_context_length to at most 128"):
        params_from_config(dynamic, TIED_WEIGHTS, context=256)


def test_mistral_within_its_window_is_llamas_definition():
    """A window no shorter than the context never leaves a key out: the whole-context attention of
    ExecuTorch's Llama definition computes what Mistral's computes (none: Mistral v0.3's null)."""
    llama = params_from_config(config_for("llama"), TIED_WEIGHTS, context=32)
    assert params_from_config(config_for("mistral"), TIED_WEIGHTS, context=64) == llama
    assert params_from_config({**config_for("mistral"), "sliding_window": None}, TIED_WEIGHTS, context=4096) == llama


def test_phi3_as_executorchs_phi_4_mini_spells_it():
    """Partial rotary, and LongRoPE as transformers computes it for a sequence within
    original_max_position_embeddings: the short factors, and the attention factor of the stretch."""
    params = params_from_config(config_for("phi3"), PHI3_WEIGHTS, context=32)
    assert params["partial_rotary_factor"] == 0.75 and params["use_hf_rope"] is True
    assert params["rope_scaling_short_factor"] == [1.0, 1.1, 1.3, 1.6, 2.0, 2.5]
    assert "rope_scaling_long_factor" not in params and "original_max_position_embeddings" not in params
    assert params["rope_scaling_attention_factor"] == pytest.approx(math.sqrt(1 + math.log(4) / math.log(32)))
    given = {**config_for("phi3"), "rope_scaling": {**config_for("phi3")["rope_scaling"], "attention_factor": 1.5}}
    assert params_from_config(given, PHI3_WEIGHTS, context=32)["rope_scaling_attention_factor"] == 1.5
    # transformers 5 spells RoPE's parameters, the partial factor among them, as rope_parameters
    five = {k: v for k, v in config_for("phi3").items() if k not in ("rope_scaling", "partial_rotary_factor", "rope_theta")}
    five["rope_parameters"] = {**config_for("phi3")["rope_scaling"], "rope_type": "longrope", "rope_theta": 10000.0,
                               "partial_rotary_factor": 0.75}
    assert params_from_config(five, PHI3_WEIGHTS, context=32) == params
    plain = {**config_for("phi3"), "rope_scaling": None, "partial_rotary_factor": 1.0}
    assert "rope_scaling_short_factor" not in params_from_config(plain, PHI3_WEIGHTS, context=128)


def test_phi3s_fused_weights_are_split_by_executorchs_mapping(tmp_path):
    import torch

    from ptebuild.models.executorch_llm.huggingface import convert, read_folder

    weights = make_folder(tmp_path / "hf", "phi3", seed=3, tied=True)
    params, checkpoint = convert(tmp_path / "hf", read_folder(tmp_path / "hf", context=32), tmp_path)
    converted = torch.load(checkpoint, weights_only=True)
    qkv = weights["model.layers.1.self_attn.qkv_proj.weight"]
    assert torch.equal(converted["layers.1.attention.wq.weight"], qkv[:64])
    assert torch.equal(converted["layers.1.attention.wk.weight"], qkv[64:96])
    assert torch.equal(converted["layers.1.attention.wv.weight"], qkv[96:])
    gate_up = weights["model.layers.0.mlp.gate_up_proj.weight"]
    assert torch.equal(converted["layers.0.feed_forward.w1.weight"], gate_up[:96])  # the gate: silu(w1 x) * w3 x
    assert torch.equal(converted["layers.0.feed_forward.w3.weight"], gate_up[96:])
    assert torch.equal(converted["output.weight"], weights["model.embed_tokens.weight"])  # tied
    assert json.loads(params.read_text())["partial_rotary_factor"] == 0.75


def test_lfm2_as_executorchs_own_params_spell_it():
    """The keys and spellings of ExecuTorch's ``lfm2/config/lfm2_350m_config.json``; LFM2-350M's
    FFN: intermediate_size 6656 -> int(2/3 of it) 4437 -> rounded up to 256: 4608, as that file has."""
    assert params_from_config(config_for("lfm2"), TIED_WEIGHTS) == {
        "dim": 64, "ffn_dim_multiplier": 1, "hidden_dim": 96, "n_heads": 4, "n_kv_heads": 2, "n_layers": 3,
        "norm_eps": 1e-5, "rope_theta": 1000000.0, "use_scaled_rope": False, "vocab_size": 256, "use_hf_rope": True,
        "use_qk_norm": True, "qk_norm_before_rope": True, "layer_types": LFM2_LAYERS,
    }
    size_350m = {**config_for("lfm2"), "intermediate_size": 6656, "block_multiple_of": 256}
    assert params_from_config(size_350m, TIED_WEIGHTS)["hidden_dim"] == 4608
    by_index = {k: v for k, v in config_for("lfm2").items() if k != "layer_types"} | {"full_attn_idxs": [1]}
    assert params_from_config(by_index, TIED_WEIGHTS)["layer_types"] == LFM2_LAYERS


def test_lfm2s_weights_are_split_by_executorchs_mapping(tmp_path):
    import torch

    from ptebuild.models.executorch_llm.huggingface import convert, read_folder

    weights = make_folder(tmp_path / "hf", "lfm2", seed=3, tied=False)
    _, checkpoint = convert(tmp_path / "hf", read_folder(tmp_path / "hf", context=32), tmp_path)
    converted = torch.load(checkpoint, weights_only=True)
    b, c, x = weights["model.layers.0.conv.in_proj.weight"].chunk(3)
    assert torch.equal(converted["layers.0.conv.B_proj.weight"], b) and torch.equal(converted["layers.0.conv.x_proj.weight"], x)
    assert torch.equal(converted["layers.0.conv.C_proj.weight"], c)
    assert torch.equal(converted["layers.1.attention.q_norm_fn.weight"], weights["model.layers.1.self_attn.q_layernorm.weight"])
    assert torch.equal(converted["norm.weight"], weights["model.embedding_norm.weight"])
    # upstream's map leaves an own output layer as lm_head.weight: it is the model's output.weight
    assert torch.equal(converted["output.weight"], weights["lm_head.weight"]) and "lm_head.weight" not in converted


REFUSED_TYPES = {
    "gemma3_text": "config.json has model_type 'gemma3_text'; ExecuTorch 1.5.1's LLM export has no Gemma 3 definition "
                   "(LlmConfig.base.model_class has none, and its Llama definition never applies the ModelArgs fields Gemma 3 "
                   "needs: post_attention_norm, post_ffn_norm, embedding_scale_factor, attention_multiplier, "
                   "local_rope_theta); its examples/models/gemma3/convert_weights.py converts for Qualcomm's static Llama "
                   "(examples/qualcomm/oss_scripts/llama, QNN only)",
    "granite": "config.json has model_type 'granite'; ExecuTorch 1.5.1's LLM export has no Granite definition "
               "(LlmConfig.base.model_class has none, and its Llama definition never applies the ModelArgs fields Granite "
               "needs: embedding_scale_factor, attention_multiplier, residual_multiplier, logits_scaling); its "
               "examples/models/granite/convert_weights.py converts for Qualcomm's static Llama "
               "(examples/qualcomm/oss_scripts/llama, QNN only)",
    "qwen3_5": "config.json has model_type 'qwen3_5'; ptebuild does not map Qwen3.5's config (gated DeltaNet layers) to "
               "ExecuTorch's params yet: give params (ExecuTorch's examples/models/qwen3_5/config/0_8b_config.json, in its "
               "repository, not in the wheel) and a checkpoint made by examples/models/qwen3_5/convert_weights.py, with "
               "model_class qwen3_5_0_8b",
    "smollm3": "config.json has model_type 'smollm3', which leaves RoPE out of layer 3 (no_rope_layers); ExecuTorch 1.5.1's "
               "Llama definition rotates in every layer (ModelArgs.no_rope_layer_interval is read only by Qualcomm's static "
               "Llama (examples/qualcomm/oss_scripts/llama, QNN only), for which examples/models/smollm3/convert_weights.py "
               "converts) and LlmConfig has no SmolLM3 class",
}


@pytest.mark.parametrize("model_type", sorted(REFUSED_TYPES))
def test_families_executorch_converts_but_does_not_define_are_one_line(model_type):
    """Each model_type with an upstream convert_weights.py that ExecuTorch's LLM export cannot
    compute: one line naming what upstream lacks (checked against ExecuTorch 1.5.1's sources)."""
    config = config_for("smollm3") if model_type == "smollm3" else {**config_for("llama"), "model_type": model_type}
    with pytest.raises(FolderProblem) as refused:
        params_from_config(config, TIED_WEIGHTS, context=32)
    assert str(refused.value) == REFUSED_TYPES[model_type]


def test_a_smollm3_that_rotates_in_every_layer_is_llamas_definition():
    """transformers' SmolLM3 without NoPE layers (all of no_rope_layers 1, or no interval) computes
    Llama; upstream's smollm3 converter writes the embedding as the output layer, so untied is refused."""
    rotating = {**config_for("smollm3"), "no_rope_layers": [1, 1, 1, 1]}
    llama = {**config_for("llama"), "num_hidden_layers": 4}
    assert params_from_config(rotating, TIED_WEIGHTS, context=32) == params_from_config(llama, TIED_WEIGHTS, context=32)
    # without no_rope_layers, transformers leaves RoPE out of every no_rope_layer_interval-th layer
    every_second = {k: v for k, v in config_for("smollm3").items() if k != "no_rope_layers"} | {"no_rope_layer_interval": 2}
    with pytest.raises(FolderProblem, match="which leaves RoPE out of layers 1, 3 "):
        params_from_config(every_second, TIED_WEIGHTS, context=32)
    with pytest.raises(FolderProblem, match="ExecuTorch's smollm3 converter writes the embedding as the output layer"):
        params_from_config({**rotating, "tie_word_embeddings": False}, TIED_WEIGHTS | {"lm_head.weight"}, context=32)


@pytest.mark.parametrize("change,message", [
    ({"conv_L_cache": 4}, "config.json has conv_L_cache 4 and conv_bias False; ExecuTorch's lfm2 ShortConvBlock convolves "
                          "over 3 positions without a bias"),
    ({"layer_types": ["conv", "mamba", "conv"]},
     "config.json has layer_types ['conv', 'mamba', 'conv']; LFM2 takes 3 of conv, full_attention"),
    ({"tie_word_embeddings": False}, "config.json has tie_word_embeddings = false, and the weights have no lm_head.weight"),
])
def test_what_executorchs_lfm2_does_not_compute_is_refused(change, message):
    with pytest.raises(FolderProblem) as refused:
        params_from_config({**config_for("lfm2"), **change}, TIED_WEIGHTS)
    assert str(refused.value) == message


@pytest.mark.parametrize("change,message", [
    ({"model_type": "gpt2"}, "config.json has model_type 'gpt2'; ExecuTorch's definitions take lfm2, llama, mistral, phi3, qwen2, qwen3, smollm3"),
    ({"hidden_act": "gelu"}, "config.json has hidden_act 'gelu'; ExecuTorch's llama definition computes silu"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "config.json scales RoPE ('yarn')"),
    ({"rope_scaling": {**LLAMA3_ROPE, "factor": None}}, "config.json's RoPE scaling ('llama3') has no factor above 0"),
    ({"rope_scaling": {**LLAMA3_ROPE, "high_freq_factor": 1.0}},
     "config.json's RoPE scaling ('llama3') needs high_freq_factor above low_freq_factor (1.0 and 1.0)"),
    ({"tie_word_embeddings": False}, "config.json has tie_word_embeddings = false, and the weights have no lm_head.weight"),
    ({"attention_bias": True}, "config.json has attention_bias = true; ExecuTorch's llama definition has no such biases"),
])
def test_what_executorchs_definitions_do_not_compute_is_refused(change, message):
    with pytest.raises(FolderProblem, match=message.replace("(", r"\(").replace(")", r"\)")):
        params_from_config({**config_for("llama"), **change}, TIED_WEIGHTS)


@pytest.mark.parametrize("model_type,change,context,message", [
    ("mistral", {"sliding_window": 16}, 32,
     "config.json has sliding_window 16, shorter than the context (max_context_length 32): each token would see only "
     "the last 16, and ExecuTorch's llama3 definition attends to the whole context; set max_context_length to at most 16"),
    ("phi3", {}, 64,
     "config.json's LongRoPE (rope_scaling) switches to its long factors past original_max_position_embeddings (32), "
     "and ExecuTorch's table takes one set for every position; set max_context_length to at most 32"),
    ("phi3", {"attention_bias": True}, 32,
     "config.json has attention_bias = true; ExecuTorch's phi3 definition has no such biases"),
    ("phi3", {"rope_scaling": {"type": "longrope", "short_factor": [1.0, 2.0], "long_factor": [1.0, 2.0]}}, 32,
     "config.json's LongRoPE has 2 short factors; the rotated part of a head (12 of 16) takes 6"),
])
def test_what_a_context_or_a_family_does_not_fit_is_refused(model_type, change, context, message):
    weights = PHI3_WEIGHTS if model_type == "phi3" else TIED_WEIGHTS
    with pytest.raises(FolderProblem, match=message.replace("(", r"\(").replace(")", r"\)")):
        params_from_config({**config_for(model_type), **change}, weights, context=context)


def test_a_folder_that_cannot_be_taken_is_one_located_line(tmp_path):
    manifest = _project(tmp_path, "llama")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "model_type": "gemma"}))
    done = ptebuild("build", manifest, "--cache", tmp_path / "cache")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: {manifest}: models.hf.huggingface: 'hf': config.json has model_type 'gemma'; ExecuTorch's "
        "definitions take lfm2, llama, mistral, phi3, qwen2, qwen3, smollm3 from a Hugging Face folder (use params and checkpoint for the others)"
    )
    (tmp_path / "hf" / "model.safetensors").unlink()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    done = ptebuild("build", manifest, "--cache", tmp_path / "cache")
    assert done.returncode == 2
    assert "models.hf.huggingface: 'hf': model.safetensors: no such file" in done.stderr


def test_weight_only_int8_of_a_model_with_qkv_biases_is_one_located_line(tmp_path):
    """ExecuTorch's ``qmode = 'int8'`` swaps each linear layer for one without a bias: a Qwen2
    folder failed inside its export ("Unexpected key(s) in state_dict: layers.0.attention.wq.bias",
    "report it to ExecuTorch"). Now refused at the option, before the export, with what works."""
    manifest = _project(tmp_path, "qwen2", manifest=MANIFEST.replace(
        "options = { use_sdpa_with_kv_cache = true }", 'options = { use_sdpa_with_kv_cache = true, qmode = "int8" }'))
    done = ptebuild("build", manifest, "--cache", tmp_path / "cache")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(
        f"error: {manifest}: programs.hf_xnnpack.options.qmode: qmode 'int8' (ExecuTorch's weight-only int8 linear layers, "
        "which have no bias) cannot take this model: its attention's q, k and v have biases (attention_qkv_bias, "
        "hf/config.json) and ExecuTorch's export fails loading them; use qmode = '8da4w' (with group_size), or remove qmode")


@pytest.mark.parametrize("extra,message", [
    ('params = "params.json"\n', "give params (a params JSON, with an optional checkpoint) or huggingface (a Hugging Face model folder), not both"),
    ('checkpoint = "weights.pth"\n', "a Hugging Face folder has its own weights: remove checkpoint"),
])
def test_params_or_a_folder(tmp_path, extra, message):
    manifest = _project(tmp_path, "llama", manifest=MANIFEST.replace('seed = 3\n', 'seed = 3\n' + extra))
    done = ptebuild("build", manifest, "--cache", tmp_path / "cache")
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_the_key_covers_the_folders_config_and_weights_by_content(tmp_path):
    from ptebuild.builder.keys import explain_changes, program_inputs
    from ptebuild.hashing import hash_file
    from ptebuild.manifest import load_manifest

    manifest = _project(tmp_path, "llama")

    def inputs() -> dict[str, str]:
        plan = load_manifest(manifest)
        return program_inputs(plan.programs[0], plan, hash_file)

    before = inputs()
    make_folder(tmp_path / "hf", "llama", seed=4)
    assert explain_changes(before, inputs()) == ["source file hf/model.safetensors changed"]
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-5}))
    assert "source file hf/config.json changed" in explain_changes(before, inputs())


@pytest.mark.parametrize(("value", "ids"), [(1, (1,)), ([128001, 128008, 128009], (128001, 128008, 128009)),
                                             ([2, 2, 5], (2, 5)), (None, ()), ("</s>", ()), ([1, True], ())])
def test_the_configs_eos_ids_are_the_runners_too(value, ids):
    """Llama 3 Instruct's config has three EOS ids and the tokenizer one: the runner must stop at
    each (get_eos_ids). Before, only the tokenizer's EOS was written."""
    from ptebuild.models.executorch_llm.huggingface import config_eos_ids

    assert config_eos_ids({"eos_token_id": value}) == ids


def test_a_folder_reads_the_eos_ids_of_its_config(tmp_path):
    from ptebuild.models.executorch_llm.huggingface import read_folder

    folder = tmp_path / "hf"
    make_folder(folder, "llama", seed=1)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "eos_token_id": [1, 7]}))
    assert read_folder(folder, 32).eos_ids == (1, 7)
