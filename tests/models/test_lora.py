"""LoRA: chat.toml's two programs of one model with different adapters (PEFT's layout, made by
``manifests/chat/make_adapters.py``), built in the session's chat build: one foundation ``.ptd``
shared and written once, each adapter's weights in a small ``.ptd`` of its own, SHA-256 keys that
refuse another base's foundation or another adapter's file, the adapter applied as LoRA defines it
(checked against the base model with the adapter merged into its weights, outside ExecuTorch's
LoRA modules), ``run --prompt``, bundles and verify."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from helpers import ptebuild

import ptebuild as api
from ptebuild.errors import LoadError

LORA = ("chat_lora_story", "chat_lora_poem")
PROMPT = [5, 17, 200, 33, 4, 99, 128, 64]


def _programs(document: dict) -> dict[str, dict]:
    return {p["name"]: p for p in document["targets"]}


def _logits(out: Path, name: str, ptds: list[str]):
    import torch

    from ptebuild.models.executorch_llm.native_output import register_llm_kernels
    from ptebuild.runtime import load

    register_llm_kernels()
    program = load(out / f"{name}.pte", [out / p for p in ptds], allow_split=True)
    return program.run("forward", [torch.tensor([PROMPT]), torch.tensor([0])])[0].reshape(-1).to(torch.float64)


def test_a_lora_pair_shares_one_foundation_file_and_has_its_own_adapter_files(chat_build):
    _, out, _, code, document, stderr = chat_build
    assert code == 0, stderr
    programs = _programs(document)
    for name in LORA:
        program = programs[name]
        assert program["status"] == "built" and program["check"] == "executorch-llm-generation"
        assert program["figures"][1]["tokens_agreed"] == 16 and program["figures"][1]["runner_tokens"] >= 1
        names = {Path(o["path"]).name for o in program["outputs"]}
        assert names == {f"{name}.pte", "chat_foundation.ptd", f"{name}.ptd", f"{name}.tokenizer.json"}
    foundation = [next(o for o in programs[n]["outputs"] if o["path"].endswith("chat_foundation.ptd")) for n in LORA]
    assert foundation[0] == foundation[1]  # one file, the same bytes for both: merged and written once by the group
    record = json.loads((out / "ptebuild.json").read_text())["targets"]
    assert all(record[n]["shared_data"] == "chat_foundation" for n in LORA)
    base = (out / "chat_foundation.ptd").stat().st_size
    for name in LORA:  # the adapter's file is small beside the foundation
        assert (out / f"{name}.ptd").stat().st_size < base / 10
    # the adapter's keys are only in its file, the model's only in the foundation
    adapter_keys = {k.key for k in api.inspect(out / "chat_lora_story.ptd").keys}
    assert adapter_keys and not adapter_keys & {k.key for k in api.inspect(out / "chat_foundation.ptd").keys}


def test_each_program_needs_its_own_adapter_and_its_own_base(chat_build):
    """SHA-256 keys: the other adapter's file, or another program's weights of the model (its 8da4w
    program's), is refused at load, naming the missing key. (A foundation of the same model with
    another seed: the slow sibling.)"""
    from ptebuild.runtime import check

    _, out, *_ = chat_build
    check(out / "chat_lora_story.pte", [out / "chat_foundation.ptd", out / "chat_lora_story.ptd"], verify_bytes=True,
          allow_split=True)
    with pytest.raises(LoadError, match=r"chat_lora_story\.pte: needs key"):
        check(out / "chat_lora_story.pte", [out / "chat_foundation.ptd", out / "chat_lora_poem.ptd"], allow_split=True)
    with pytest.raises(LoadError, match=r"chat_lora_story\.pte: needs key"):
        check(out / "chat_lora_story.pte", [out / "chat_xnnpack_8da4w_weights.ptd", out / "chat_lora_story.ptd"],
              allow_split=True)


@pytest.mark.slow
def test_a_foundation_of_another_base_is_refused_at_load(chat_build, tmp_path):
    """The same model with another seed (another base of the same shapes and names): its foundation
    file is refused by the first base's program, naming the missing key."""
    from ptebuild.runtime import check

    manifest, out, cache, *_ = chat_build
    other = tmp_path / "other"
    text = manifest.read_text().replace("seed = 20261203", "seed = 7")
    (manifest.parent / "other.toml").write_text(text.replace('out = "../out/chat"', f'out = "{other}"'))
    done = ptebuild("build", manifest.parent / "other.toml", "--only", "chat_lora_story", "--cache", cache)
    assert done.returncode == 0, done.stderr
    with pytest.raises(LoadError, match=r"chat_lora_story\.pte: needs key"):
        check(out / "chat_lora_story.pte", [other / "chat_foundation.ptd", out / "chat_lora_story.ptd"], allow_split=True)


def test_the_adapter_is_applied_as_lora_defines_it(chat_build, tmp_path):
    """The program's logits against the base model with each adapter merged into its weights
    (W + lora_alpha / r * B @ A, PEFT's definition), computed by ExecuTorch's plain Transformer: the
    adapter's keys, modules and scale are taken as PEFT means them; and each adapter changes the
    model (the base program's logits differ)."""
    import torch
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs
    from safetensors.torch import load_file

    from ptebuild.manifest import load_manifest
    from ptebuild.models.executorch_llm.build import random_checkpoint
    from ptebuild.models.executorch_llm.spec import LlmModelSpec

    manifest, out, *_ = chat_build
    plan = load_manifest(manifest)
    spec = LlmModelSpec.model_validate(plan.programs[0].model_entry)
    base = torch.load(random_checkpoint(spec, manifest.parent, spec.seed, tmp_path), weights_only=True)
    modules = {"q_proj": "attention.wq", "k_proj": "attention.wk", "v_proj": "attention.wv", "o_proj": "attention.wo",
               "gate_proj": "feed_forward.w1", "down_proj": "feed_forward.w2", "up_proj": "feed_forward.w3"}
    base_logits = _logits(out, "chat_xnnpack", ["chat_xnnpack_weights.ptd"])
    for name, folder in (("chat_lora_story", "lora_story"), ("chat_lora_poem", "lora_poem")):
        config = json.loads((manifest.parent / "chat" / folder / "adapter_config.json").read_text())
        adapter = load_file(str(manifest.parent / "chat" / folder / "adapter_model.safetensors"))
        merged = dict(base)
        for key, a in adapter.items():
            if ".lora_A." not in key:
                continue
            b = adapter[key.replace(".lora_A.", ".lora_B.")]
            layer, module = key.split(".layers.")[1].split(".")[0], key.split(".")[-3]
            target = f"layers.{layer}.{modules[module]}.weight"
            merged[target] = merged[target] + config["lora_alpha"] / config["r"] * (b @ a)
        params = json.loads((manifest.parent / "chat" / "params.json").read_text())
        model = construct_transformer(ModelArgs(max_seq_len=64, max_context_len=64, max_batch_size=1, **params))
        model.load_state_dict({k: v for k, v in merged.items() if ".kv_cache." not in k})  # a model without a KV cache
        with torch.no_grad():
            logits = model(torch.tensor([PROMPT]))  # the last position's ([1, vocab]) or every position's
        expected = logits.reshape(-1, logits.shape[-1])[-1].to(torch.float64)
        actual = _logits(out, name, ["chat_foundation.ptd", f"{name}.ptd"])
        assert expected.shape == actual.shape == (params["vocab_size"],)  # no broadcasting of a scalar
        error = float((actual - expected).abs().max())
        print(name, "max abs error against the merged weights:", error, "; differs from the base by",
              float((actual - base_logits).abs().max()))
        assert error <= 1e-3
        assert float((actual - base_logits).abs().max()) > 0.1  # the adapter changes what the model computes


def test_run_generates_with_the_foundation_and_the_adapter(chat_build, capsys):
    from ptebuild.cli import main

    manifest, out, *_ = chat_build
    code = main(["run", str(manifest), "chat_lora_poem", "--out", str(out), "--prompt", "The robot", "--max-new-tokens", "6",
                 "--json"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    generation = json.loads(printed.out)
    assert generation["program"] == "chat_lora_poem" and 1 <= generation["generated_tokens"] <= 6


def test_the_bundle_carries_the_foundation_once_and_each_adapter(chat_build, tmp_path):
    manifest, out, *_ = chat_build
    archive = tmp_path / "chat.tar.gz"
    done = ptebuild("pack", manifest, "--out", out, "-o", archive)
    assert done.returncode == 0, done.stderr
    with tarfile.open(archive) as tar:
        names = [Path(n).name for n in tar.getnames()]
    assert names.count("chat_foundation.ptd") == 1
    assert {"chat_lora_story.ptd", "chat_lora_poem.ptd", "chat_lora_story.pte"} <= set(names)
    verified = ptebuild("verify", archive)
    assert verified.returncode == 0, verified.stderr + verified.stdout
    assert ptebuild("verify", out).returncode == 0


@pytest.mark.parametrize("options,message", [
    ('adapter_checkpoint = "chat/lora_story/adapter_model.safetensors"',
     "a LoRA adapter is adapter_checkpoint (adapter_model.safetensors) with adapter_config (adapter_config.json): give both"),
    ('adapter_checkpoint = "chat/lora_story/adapter.pt", adapter_config = "chat/lora_story/adapter_config.json"',
     "ExecuTorch's LLM export reads a PEFT adapter_model.safetensors"),
    ('lora_data_name = "chat_lora"', "lora_data_name is where a LoRA adapter's weights go"),
])
def test_bad_adapter_options_are_one_located_line(tmp_path, options, message):
    from project_copy import copy_chat_project

    manifest = copy_chat_project(tmp_path / "project")
    text = manifest.read_text().split("# LoRA:")[0]
    manifest.write_text(text + f'[programs.bad]\nmodel = "chat"\nbackend = "xnnpack"\ndata_name = "w"\noptions = {{ {options} }}\n')
    done = ptebuild("build", manifest, "--cache", tmp_path / "cache")
    assert done.returncode == 2 and "programs.bad.options" in done.stderr and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_adapter_file_and_a_lora_file_without_a_foundation(tmp_path):
    from project_copy import copy_chat_project

    manifest = copy_chat_project(tmp_path / "project")
    text = manifest.read_text()
    manifest.write_text(text.replace("chat/lora_poem/adapter_model.safetensors", "chat/lora_poem/missing.safetensors"))
    done = ptebuild("build", manifest, "--cache", tmp_path / "cache")
    assert done.returncode == 2
    assert f"error: {manifest}: programs.chat_lora_poem.options.adapter_checkpoint: no such file 'chat/lora_poem/missing.safetensors'" in done.stderr
    manifest.write_text(text.replace('backend = "xnnpack"\ndata_name = "chat_foundation"\noptions = { use_sdpa_with_kv_cache = true, adapter_checkpoint = "chat/lora_poem',
                                     'backend = "portable"\noptions = { adapter_checkpoint = "chat/lora_poem'))
    done = ptebuild("build", manifest, "--cache", tmp_path / "cache")
    assert done.returncode == 2
    assert "programs.chat_lora_poem.options.lora_data_name: ExecuTorch's LLM export writes an adapter's own weights file for XNNPACK" in done.stderr
