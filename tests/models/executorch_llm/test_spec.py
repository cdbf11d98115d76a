"""The ``executorch-llm`` kind's tables (:mod:`ptebuild.models.executorch_llm.spec`), validated by themselves.

A model names params or a Hugging Face folder (one of them), a context at least one prompt long,
and metadata methods that are identifiers other than ``forward``; a program's options are
ExecuTorch's LLM spelling (``qmode``, ``group_size`` only where weights are grouped,
``embedding_quantize`` as ``bits,group``), LoRA adapters come as a pair of PEFT files, and a
multi-method program's methods avoid the metadata methods' names. Each backend gets its own
options model; one ptebuild lowers itself (CUDA) takes upstream's options and its own. Nothing
here imports torch. The located one-line messages of whole manifests are
``tests/manifest/test_load.py``'s (``bad-llm-*.toml``).
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from pydantic import ValidationError

from ptebuild.backends import get_backend
from ptebuild.models.executorch_llm.spec import (
    METADATA_METHODS,
    MODEL_CLASSES,
    OPTIONS_BY_BACKEND,
    LlmCoremlOptions,
    LlmMethod,
    LlmModelSpec,
    LlmOpenvinoOptions,
    LlmOptions,
    LlmVulkanOptions,
    LlmXnnpackOptions,
    backend_options,
    options_model,
)

MODEL = {"kind": "executorch-llm", "params": "chat/params.json", "tokenizer": "chat/tokenizer.json"}


def refused(model, data: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        model.model_validate(data)


def test_a_models_defaults():
    spec = LlmModelSpec.model_validate(MODEL)
    assert (spec.model_class, spec.max_seq_length, spec.max_context_length, spec.context_length) == (None, 128, None, 128)
    assert (spec.use_kv_cache, spec.enable_dynamic_shape, spec.metadata, spec.seed, spec.checkpoint) == (True, True, {}, 0, None)
    assert LlmModelSpec.model_validate({**MODEL, "max_seq_length": 64, "max_context_length": 256}).context_length == 256


@pytest.mark.parametrize("model_class", MODEL_CLASSES)
def test_every_model_class_is_taken(model_class):
    assert LlmModelSpec.model_validate({**MODEL, "model_class": model_class}).model_class == model_class


@pytest.mark.parametrize(("changes", "message"), [
    ({"params": None}, "give params (a params JSON, with an optional checkpoint) or huggingface (a Hugging Face model folder)"),
    ({"huggingface": "hf/smollm2"}, "or huggingface (a Hugging Face model folder), not both"),
    ({"params": None, "huggingface": "hf/smollm2", "checkpoint": "w.pth"}, "a Hugging Face folder has its own weights: remove checkpoint"),
    ({"use_kv_cache": False, "enable_dynamic_shape": False}, "use_kv_cache = false needs enable_dynamic_shape = true"),
    ({"max_seq_length": 64, "max_context_length": 32},
     "max_context_length (32) is shorter than max_seq_length (64); the KV cache must hold at least one prompt"),
    ({"max_seq_length": 1}, "greater than or equal to 2"),
    ({"metadata": {"forward": 1}}, "metadata may not name 'forward' (a method of the model)"),
    ({"metadata": {"get-style": 1}}, "metadata method name 'get-style' is not an identifier"),
    ({"metadata": {"get_style": "formal"}}, "metadata.get_style"),
    ({"metadata": {"get_scale": 0.5}}, "metadata.get_scale"),
    ({"model_class": "llama4"}, "model_class"),
    ({"model_class": "static_llama"}, "model_class"),
    ({"tokenizer": None}, "tokenizer"),
    ({"kind": "factory"}, "kind"),
    ({"max_seq_len": 64}, "Extra inputs are not permitted"),
], ids=["neither-params-nor-hf", "both", "hf-with-checkpoint", "no-cache-no-dynamic-shape", "context-too-short", "seq-length-1",
        "metadata-forward", "metadata-not-identifier", "metadata-text", "metadata-float", "unknown-class", "static-llama",
        "no-tokenizer", "wrong-kind", "unknown-key"])
def test_a_bad_model_table_is_refused(changes, message):
    data = {key: value for key, value in {**MODEL, **changes}.items() if value is not None}
    refused(LlmModelSpec, data, message)


def test_metadata_values_are_ints_bools_and_lists_of_ints():
    metadata = {"get_bos_id": 1, "get_eos_ids": [2, 3], "use_style": True}
    spec = LlmModelSpec.model_validate({**MODEL, "metadata": metadata})
    assert spec.metadata == metadata and spec.metadata["use_style"] is True


def test_a_hugging_face_folder_instead_of_params():
    spec = LlmModelSpec.model_validate({"kind": "executorch-llm", "huggingface": "hf/smollm2", "tokenizer": "hf/smollm2/tokenizer.json"})
    assert (spec.params, spec.huggingface) == (None, "hf/smollm2")


@pytest.mark.parametrize(("data", "message"), [
    ({"name": "story", "export_seq_len": 64}, "export_seq_len (MethodConfig.export_seq_len) is not used by ExecuTorch 1.5.1's multi-method export"),
    ({"name": "2nd"}, "method name '2nd' is not an identifier (letters, digits, _; not starting with a digit)"),
    ({"name": "get_vocab_size"}, "'get_vocab_size' is one of the program's metadata methods"),
    ({"name": "story", "adapter_checkpoint": "a/adapter_model.safetensors"}, "a LoRA adapter is adapter_checkpoint"),
    ({"name": "story", "adapter_config": "a/adapter_config.json"}, "give both"),
    ({"name": "story", "adapter_checkpoint": "a/adapter.pt", "adapter_config": "a/adapter_config.json"},
     "adapter_checkpoint 'a/adapter.pt': ExecuTorch's LLM export reads a PEFT adapter_model.safetensors"),
], ids=["export-seq-len", "not-identifier", "metadata-name", "checkpoint-alone", "config-alone", "not-safetensors"])
def test_a_bad_method_is_refused(data, message):
    refused(LlmMethod, data, message)


@pytest.mark.parametrize("name", METADATA_METHODS)
def test_no_method_takes_a_metadata_methods_name(name):
    refused(LlmMethod, {"name": name}, "is one of the program's metadata methods")


@pytest.mark.parametrize("form", ["8,0", "4,32", "2,64"])
def test_embedding_quantize_is_bits_comma_group(form):
    assert LlmOptions.model_validate({"embedding_quantize": form}).embedding_quantize == form


@pytest.mark.parametrize(("options", "message"), [
    ({"embedding_quantize": "3,0"}, "'3,0' is not '<bits>,<group size>' with bits 2, 4 or 8"),
    ({"embedding_quantize": "8"}, "'8' is not '<bits>,<group size>'"),
    ({"embedding_quantize": "8,x"}, "'8,x' is not '<bits>,<group size>'"),
    ({"group_size": 32}, "group_size is for qmode '8da4w' or '4w' (no qmode); remove it"),
    ({"qmode": "int8", "group_size": 32}, "group_size is for qmode '8da4w' or '4w' (qmode is 'int8'); remove it"),
    ({"qmode": "8da4w", "group_size": 0}, "greater than or equal to 1"),
    ({"quantize": "8da4w"}, "quantize is the XNNPACK option of factory models"),
    ({"share_mutable_buffers": True}, "share_mutable_buffers is for a program of several methods (methods)"),
    ({"lora_data_name": "adapter"}, "lora_data_name is where a LoRA adapter's weights go"),
    ({"adapter_checkpoint": "a/adapter_model.safetensors"}, "give both"),
    ({"methods": []}, "at least 1 item"),
    ({"dtype_override": "fp16"}, "dtype_override"),
    ({"extended_ops": True}, "Extra inputs are not permitted"),
], ids=["bits-3", "no-group", "group-not-number", "group-without-qmode", "group-with-int8", "group-0", "factory-spelling",
        "share-without-methods", "lora-data-without-adapter", "adapter-alone", "no-methods", "fp16", "xnnpack-only-key"])
def test_bad_program_options_are_refused(options, message):
    refused(LlmOptions, options, message)


@pytest.mark.parametrize("qmode", ["8da4w", "4w"])
def test_group_size_with_grouped_weights(qmode):
    assert LlmOptions.model_validate({"qmode": qmode, "group_size": 64}).group_size == 64


def test_openvinos_4_bit_compression_takes_a_group_size_and_its_8_bit_does_not():
    assert LlmOpenvinoOptions.model_validate({"pt2e_quantize": "openvino_4wo", "group_size": 128}).group_size == 128
    refused(LlmOpenvinoOptions, {"pt2e_quantize": "openvino_8wo", "group_size": 128}, "group_size is for qmode '8da4w' or '4w'")


def test_the_files_options_name_with_their_keys():
    options = LlmXnnpackOptions.model_validate({
        "methods": [
            {"name": "forward"},
            {"name": "story", "adapter_checkpoint": "story/adapter_model.safetensors", "adapter_config": "story/adapter_config.json"},
        ],
        "share_mutable_buffers": True,
    })
    assert options.files() == (("options.methods[1].adapter_checkpoint", "story/adapter_model.safetensors"),
                               ("options.methods[1].adapter_config", "story/adapter_config.json"))
    lora = LlmOptions.model_validate({"adapter_checkpoint": "a/adapter_model.safetensors", "adapter_config": "a/adapter_config.json",
                                      "lora_data_name": "adapter_a"})
    assert lora.files() == (("options.adapter_checkpoint", "a/adapter_model.safetensors"), ("options.adapter_config", "a/adapter_config.json"))
    assert LlmOptions().files() == ()


@pytest.mark.parametrize(("backend", "model"), [("portable", LlmOptions), ("xnnpack", LlmXnnpackOptions), ("vulkan", LlmVulkanOptions),
                                                ("coreml", LlmCoremlOptions), ("openvino", LlmOpenvinoOptions)])
def test_each_upstream_backend_has_its_options_model(backend, model):
    assert options_model(backend) is model is OPTIONS_BY_BACKEND[backend]


def test_each_backends_own_switches_stay_its_own():
    assert LlmXnnpackOptions.model_validate({"extended_ops": True}).extended_ops is True
    refused(LlmVulkanOptions, {"extended_ops": True}, "Extra inputs are not permitted")
    assert LlmCoremlOptions.model_validate({"ios": 18, "enable_state": True}).ios == 18
    refused(LlmCoremlOptions, {"ios": 14}, "ios")


def test_a_backend_ptebuild_lowers_itself_takes_upstreams_options_and_its_own():
    cuda = options_model("cuda")
    assert options_model("cuda") is cuda  # made once
    assert issubclass(cuda, LlmOptions) and issubclass(cuda, get_backend("cuda").options_model)
    options = cuda.model_validate({"dtype_override": "bf16", "platform": "linux", "max_autotune": True})
    assert (options.dtype_override, options.max_autotune) == ("bf16", True)
    own = backend_options("cuda", options)
    assert own["max_autotune"] is True and own["platform"] == "linux" and "dtype_override" not in own
    assert get_backend("cuda").options_model.model_validate(own).max_autotune is True


def test_a_backend_no_one_registered_gets_upstreams_options():
    assert options_model("no-such-backend") is LlmOptions


def test_the_tables_import_no_torch():
    code = ("import sys; from ptebuild.models.executorch_llm.spec import options_model; options_model('cuda'); "
            "print([m for m in ('torch', 'executorch') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
