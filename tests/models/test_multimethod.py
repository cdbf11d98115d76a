"""A language model program of several methods (``options.methods``: ExecuTorch's multi-method LLM
export): the tiny chat model as ``forward`` and as ``story`` (with the chat model's story LoRA
adapter) in one ``.pte``, built once for this module; each method checked by generation against its
own eager model, ``forward`` then in TextLLMRunner; the weights the methods share stored once; each
method's adapter in the program's key; a method against the wrong eager model named wrong.

The build (about 45 s) and the tests on it are slow tests; the default run has their fast siblings:
the upstream configuration the program is exported with, and the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import first_program_inputs, ptebuild
from project_copy import copy_chat_project

MULTI = """
[defaults]
out = "out"

[models.chat]
kind = "executorch-llm"
model_class = "llama3"
params = "chat/params.json"
tokenizer = "chat/tokenizer.json"
max_seq_length = 64
max_context_length = 64
seed = 20261203

[programs.chat_multi]
model = "chat"
backend = "xnnpack"

[programs.chat_multi.options]
use_sdpa_with_kv_cache = true
share_mutable_buffers = true
methods = [
  { name = "forward" },
  { name = "story", adapter_checkpoint = "chat/lora_story/adapter_model.safetensors", adapter_config = "chat/lora_story/adapter_config.json" },
]
"""


def multi_project(folder: Path) -> Path:
    """The chat project's files (params, tokenizer, adapters) and the multi-method manifest above."""
    manifest = copy_chat_project(folder).with_name("multi.toml")
    manifest.write_text(MULTI)
    return manifest


@pytest.fixture(scope="module")
def multi_build(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("multi")
    manifest = multi_project(root / "project")
    done = ptebuild("build", manifest, "--cache", root / "cache", "--json")
    try:
        document = json.loads(done.stdout)
    except ValueError:
        raise AssertionError(f"no JSON (exit {done.returncode}):\n{done.stdout}\n{done.stderr}") from None
    return manifest, manifest.parent / "out", done.returncode, document, done.stderr


@pytest.mark.slow  # fast sibling: test_the_methods_go_to_upstreams_multimethod_config
def test_each_method_is_checked_by_generation_and_forward_in_the_runner(multi_build):
    _, _, code, document, stderr = multi_build
    assert code == 0, stderr
    (target,) = document["targets"]
    figures = target["figures"]
    by_method = {(f["method"], f["stage"]): f for f in figures}
    assert set(by_method) == {("forward", "prefill"), ("forward", "decode"), ("story", "prefill"), ("story", "decode")}
    for method in ("forward", "story"):
        decode = by_method[(method, "decode")]
        assert decode["tokens_agreed"] == decode["tokens"] == 16, decode
        assert by_method[(method, "prefill")]["cosine"] > 0.9999
    assert by_method[("forward", "decode")]["runner_tokens"] > 0  # TextLLMRunner generated with forward
    # one .pte holds every weight (upstream's multi-method export writes no .ptd), and the tokenizer
    assert sorted(Path(o["path"]).name for o in target["outputs"]) == ["chat_multi.pte", "chat_multi.tokenizer.json"]


@pytest.mark.slow  # fast sibling: test_the_methods_go_to_upstreams_multimethod_config
def test_the_table_gives_each_methods_tokens(multi_build):
    manifest, *_ = multi_build
    done = ptebuild("build", manifest, "--cache", manifest.parent.parent / "cache")  # a no-op: the report replayed
    assert done.returncode == 0, done.stderr
    assert "methods story, forward) tokens story 16/16, forward 16/16" in done.stdout


@pytest.mark.slow  # fast sibling: test_the_methods_go_to_upstreams_multimethod_config
def test_the_program_holds_the_methods_and_the_shared_weights_once(multi_build):
    manifest, out, *_ = multi_build
    done = ptebuild("inspect", "--json", out / "chat_multi.pte")
    document = json.loads(done.stdout)
    names = [m["name"] for m in document["methods"]]
    assert {"forward", "story", "get_max_seq_len", "get_eos_ids"} <= set(names)
    for part in ("named_data", "segments"):  # no bytes stored twice
        blobs = [entry["sha256"] for entry in document[part]]
        assert len(blobs) == len(set(blobs)), part
    # The model's float32 parameters (ExecuTorch's Llama: dim 64, 2 layers, FFN 192, vocab 256,
    # output not tied) once, and the adapter's: not two copies of the model.
    dim, kv, ffn, vocab, layers = 64, 32, 192, 256, 2
    model_bytes = 4 * (2 * vocab * dim + dim + layers * (2 * dim * dim + 2 * dim * kv + 3 * dim * ffn + 2 * dim))
    adapter = (manifest.parent / "chat" / "lora_story" / "adapter_model.safetensors").stat().st_size
    constants = sum(s["size"] for s in document["segments"] if "constant tensors" in s["used_by"])
    weights_inside = sum(d["size"] for d in document["named_data"]) + constants
    assert model_bytes <= weights_inside <= 1.1 * model_bytes + adapter, (weights_inside, model_bytes, adapter)


def test_the_methods_go_to_upstreams_multimethod_config(tmp_path):
    """What the slow build exports with: upstream's ``LlmConfig`` names each method with its own
    LoRA adapter (none for ``forward``), shares the KV cache as asked, and sets no program-wide
    adapter (upstream refuses one beside ``multimethod.methods``)."""
    from ptebuild.manifest import load_manifest
    from ptebuild.models.executorch_llm.export import llm_config
    from ptebuild.models.executorch_llm.spec import LlmModelSpec, LlmXnnpackOptions

    manifest = multi_project(tmp_path / "project")
    plan = load_manifest(manifest)
    (program,) = plan.programs
    spec = LlmModelSpec.model_validate(program.model_entry)
    options = LlmXnnpackOptions.model_validate(program.options)
    config = llm_config(spec, options, program, manifest.parent, {}, "xnnpack")
    methods = {m.method_name: m.lora_config for m in config.multimethod.methods}
    assert list(methods) == ["forward", "story"]
    assert methods["forward"] is None
    story = manifest.parent / "chat" / "lora_story"
    assert (methods["story"].adapter_checkpoint, methods["story"].adapter_config) == (
        str(story / "adapter_model.safetensors"), str(story / "adapter_config.json"))
    assert config.multimethod.share_mutable_buffers is True
    assert config.base.lora_config is None
    assert config.backend.xnnpack.enabled


def test_changing_one_methods_adapter_changes_the_key(tmp_path):
    from ptebuild.builder.keys import action_key, explain_changes

    manifest = multi_project(tmp_path / "project")

    def inputs() -> dict[str, str]:
        return first_program_inputs(manifest)

    before = inputs()
    adapter = manifest.parent / "chat" / "lora_story" / "adapter_model.safetensors"
    data = bytearray(adapter.read_bytes())
    data[-1] ^= 1  # one bit of the adapter's last weight
    adapter.write_bytes(bytes(data))
    after = inputs()
    assert action_key(after) != action_key(before)
    assert explain_changes(before, after) == ["source file chat/lora_story/adapter_model.safetensors changed"]


@pytest.mark.slow  # fast sibling: test_the_methods_go_to_upstreams_multimethod_config
def test_a_method_checked_against_another_methods_model_is_named_wrong(multi_build, tmp_path):
    """The check itself, run again on the built program: ``story`` against ExecuTorch's plain
    Transformer with the story adapter merged into its weights (``W + alpha / r * B @ A``, LoRA's
    definition, outside ExecuTorch's LoRA modules) agrees; against the base model (``forward``'s) it
    is a wrong program, named by its method."""
    import torch
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs
    from safetensors.torch import load_file

    from ptebuild.errors import CheckError
    from ptebuild.manifest import load_manifest
    from ptebuild.models.executorch_llm.build import random_checkpoint
    from ptebuild.models.executorch_llm.eager_reference import Shape
    from ptebuild.models.executorch_llm.generation import check_generation
    from ptebuild.models.executorch_llm.spec import LlmModelSpec
    from ptebuild.models.executorch_llm.tokenizer import load_tokenizer

    manifest, out, code, *_ = multi_build
    assert code == 0
    plan = load_manifest(manifest)
    program = plan.programs[0]
    spec = LlmModelSpec.model_validate(program.model_entry)
    params = json.loads((manifest.parent / "chat" / "params.json").read_text())
    base = torch.load(random_checkpoint(spec, manifest.parent, spec.seed, tmp_path), weights_only=True)
    folder = manifest.parent / "chat" / "lora_story"
    config = json.loads((folder / "adapter_config.json").read_text())
    adapter = load_file(str(folder / "adapter_model.safetensors"))
    modules = {"q_proj": "attention.wq", "v_proj": "attention.wv"}
    merged = dict(base)
    for key, a in adapter.items():
        if ".lora_A." in key:
            layer, module = key.split(".layers.")[1].split(".")[0], key.split(".")[-3]
            target = f"layers.{layer}.{modules[module]}.weight"
            merged[target] = merged[target] + config["lora_alpha"] / config["r"] * (adapter[key.replace(".lora_A.", ".lora_B.")] @ a)

    def model(weights: dict) -> torch.nn.Module:
        made = construct_transformer(ModelArgs(max_seq_len=64, max_context_len=64, max_batch_size=1, use_kv_cache=True,
                                               enable_dynamic_shape=True, **params))
        made.load_state_dict(weights)
        return made.eval()

    shape = Shape(use_kv_cache=True, dynamic=True, max_seq_length=64, context_length=64)
    tokenizer = load_tokenizer(manifest.parent / "chat" / "tokenizer.json", "multi.toml", "models.chat.tokenizer")
    caches = tuple(name for name in base if ".kv_cache." in name)
    agreed = check_generation(model(merged), program, shape, out / "chat_multi.pte", [], tokenizer, caches, 1.0, method="story")
    assert {f.method for f in agreed.figures} == {"story"}
    with pytest.raises(CheckError, match=r"method 'story'"):
        check_generation(model(base), program, shape, out / "chat_multi.pte", [], tokenizer, caches, 1.0, method="story")
