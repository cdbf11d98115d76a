"""The export of an LLM program (:mod:`ptebuild.models.executorch_llm.export`): the manifest's model
and program written into upstream's ``LlmConfig``, the hooks ptebuild puts into upstream's
``LLMEdgeManager`` for the duration of an export (its managers kept, the ``get_max_seq_len``
override kept, its edge program counted before emitting, its program saved through ptebuild,
its progress sent to stderr), the program written ptebuild's way (the KV cache's buffers named,
weights keyed by SHA-256, a LoRA adapter's weights in a file of their own), and the warning of a
program with nothing delegated to its backend.

The fast tests take ``manifests/chat.toml``'s programs (nothing built) and a model of a few
tensors through upstream's own ``LLMEdgeManager``; upstream's preparation of the chat model
takes the configs as its export would. The slow ones build chat programs for the backends
upstream's export lowers for and the route of those it does not (CUDA's).
"""

from __future__ import annotations

import json
from dataclasses import replace
from enum import Enum
from functools import reduce
from pathlib import Path

import pytest
import torch
from helpers import ptebuild
from project_copy import copy_chat_project

import ptebuild as api
from ptebuild.errors import BuildError
from ptebuild.manifest import load_manifest
from ptebuild.models.base import FolderOutputs
from ptebuild.models.executorch_llm.export import (
    _counts_before_emitting,
    _keeps_managers,
    _metadata_kept,
    _quiet_stdout,
    _saves_through,
    _undelegated,
    dtype_name,
    llm_config,
    name_mutable_buffers,
    write_program,
)
from ptebuild.models.executorch_llm.spec import LlmModelSpec, LlmXnnpackOptions, options_model

MANIFESTS = Path(__file__).resolve().parents[3] / "manifests"
BACKENDS = ("xnnpack", "vulkan", "coreml", "openvino")
writes_a_buffer = pytest.mark.filterwarnings("ignore:Mutation on a buffer in the model is detected:UserWarning")
"""ExecuTorch's emitter warns of a buffer a method writes (its initial values are not kept): a KV cache's."""


@pytest.fixture(scope="module")
def chat():
    """``manifests/chat.toml``'s programs by name (resolved; nothing built)."""
    return {program.name: program for program in load_manifest(MANIFESTS / "chat.toml").programs}


def _config(program, backend, options=None, metadata=None, **model):
    """:func:`llm_config` of ``program`` (its model changed by ``model``) with ``options`` (default:
    the program's), for ``backend``."""
    spec = LlmModelSpec.model_validate({**program.model_entry, **model})
    if options is None:
        options = options_model(program.backend).model_validate(program.options)
    return llm_config(spec, options, program, MANIFESTS, metadata or {}, backend)


def _read(config, dotted: str):
    """``config``'s value at ``dotted`` (``backend.coreml.ios``); an enum's as its value."""
    value = reduce(getattr, dotted.split("."), config)
    return value.value if isinstance(value, Enum) else value


def _enabled(config) -> list[str]:
    return [name for name in BACKENDS if getattr(config.backend, name).enabled]


def test_the_model_and_an_xnnpack_program_are_written_into_upstreams_llm_config(chat):
    program = chat["chat_xnnpack_8da4w"]
    options = LlmXnnpackOptions.model_validate({**program.options, "dtype_override": "bf16", "quantize_kv_cache": True,
                                                "extended_ops": True, "enable_bf16": True})
    config = _config(program, "xnnpack", options, {"get_eos_ids": [1], "get_bos_id": 0}, model_class="smollm2",
                     checkpoint="chat/weights.pth", max_seq_length=32, enable_dynamic_shape=False)
    assert (_read(config, "base.model_class"), config.base.params, config.base.checkpoint, config.base.tokenizer_path) == (
        "smollm2", str(MANIFESTS / "chat" / "params.json"), str(MANIFESTS / "chat" / "weights.pth"),
        str(MANIFESTS / "chat" / "tokenizer.json"))
    assert config.base.metadata == '{"get_bos_id": 0, "get_eos_ids": [1]}'  # sorted: the key does not move with the order
    assert (config.model.use_kv_cache, config.model.enable_dynamic_shape, _read(config, "model.dtype_override"),
            config.model.use_sdpa_with_kv_cache, config.model.quantize_kv_cache) == (True, False, "bf16", True, True)
    assert (config.export.max_seq_length, config.export.max_context_length, config.export.output_name) == (
        32, 64, "chat_xnnpack_8da4w.pte")
    assert (config.quantization.qmode, config.quantization.group_size, config.quantization.embedding_quantize) == (
        "8da4w", 32, "8,0")
    assert _enabled(config) == ["xnnpack"] and config.backend.xnnpack.extended_ops and config.backend.xnnpack.enable_bf16
    assert (config.export.foundation_weights_file, config.export.lora_weights_file) == ("chat_xnnpack_8da4w_weights", None)
    assert config.base.lora_config is None and config.multimethod.methods == []


def test_a_portable_program_and_ptebuilds_own_lowering_enable_no_backend_of_upstreams(chat):
    from executorch.extension.llm.export.config.llm_config import LlmConfig

    config = _config(chat["chat_xnnpack"], None)
    assert _enabled(config) == [] and config.export.output_name == "chat_xnnpack.pte"
    assert config.export.foundation_weights_file == LlmConfig().export.foundation_weights_file  # upstream's: weights in the .pte


def test_a_lora_program_names_its_adapter_and_its_two_weights_files(chat):
    config = _config(chat["chat_lora_story"], "xnnpack")
    lora = config.base.lora_config
    assert (lora.adapter_checkpoint, lora.adapter_config) == (
        str(MANIFESTS / "chat" / "lora_story" / "adapter_model.safetensors"), str(MANIFESTS / "chat" / "lora_story" / "adapter_config.json"))
    assert (config.export.foundation_weights_file, config.export.lora_weights_file) == ("chat_foundation", "chat_lora_story")


def test_each_method_of_a_multi_method_program_is_one_of_upstreams_method_configs(chat):
    story = {"adapter_checkpoint": "chat/lora_story/adapter_model.safetensors", "adapter_config": "chat/lora_story/adapter_config.json"}
    options = options_model("portable").model_validate({"methods": [{"name": "forward"}, {"name": "story", **story}],
                                                        "share_mutable_buffers": True})
    config = _config(chat["chat_xnnpack"], None, options)
    assert [(m.method_name, m.lora_config and m.lora_config.adapter_checkpoint) for m in config.multimethod.methods] == [
        ("forward", None), ("story", str(MANIFESTS / story["adapter_checkpoint"]))]
    assert config.multimethod.methods[1].lora_config.adapter_config == str(MANIFESTS / story["adapter_config"])
    assert config.multimethod.share_mutable_buffers is True and config.base.lora_config is None


@pytest.mark.parametrize("backend,options,expected", [
    pytest.param("vulkan", {"force_fp16": True}, {"backend.vulkan.force_fp16": True}, id="vulkan"),
    pytest.param("coreml", {"ios": 17, "compute_units": "cpu_and_ne", "quantize": "c4w", "enable_state": True, "preserve_sdpa": True},
                 {"backend.coreml.ios": 17, "backend.coreml.compute_units": "cpu_and_ne", "backend.coreml.quantize": "c4w",
                  "backend.coreml.enable_state": True, "backend.coreml.preserve_sdpa": True}, id="coreml"),
    pytest.param("coreml", {}, {"backend.coreml.compute_units": "cpu_only", "backend.coreml.quantize": None}, id="coreml unquantized"),
    pytest.param("openvino", {"device": "GPU", "awq": True, "scale_estimation": True, "pt2e_quantize": "openvino_4wo", "group_size": 64},
                 {"backend.openvino.device": "GPU", "backend.openvino.openvino_awq": True,
                  "backend.openvino.openvino_scale_estimation": True, "quantization.pt2e_quantize": "openvino_4wo",
                  "quantization.group_size": 64}, id="openvino"),
])
def test_each_backends_switches_reach_its_table_of_upstreams_config(chat, backend, options, expected):
    config = _config(chat["chat_xnnpack"], backend, options_model(backend).model_validate(options))
    assert _enabled(config) == [backend]
    assert {dotted: _read(config, dotted) for dotted in expected} == expected


def test_upstreams_preparation_takes_the_config_and_each_manager_and_the_metadata_are_kept(chat):
    """Upstream's own step before its export (the model made, its metadata taken) with the config:
    each manager it prepares is kept, in order, and the manifest's get_max_seq_len over upstream's."""
    from executorch.examples.models.llama import export_llama_lib
    from executorch.extension.llm.export.builder import LLMEdgeManager

    metadata = {"get_bos_id": 0, "get_eos_ids": [1], "get_max_seq_len": 40}
    config = _config(chat["chat_xnnpack"], "xnnpack", metadata=metadata)
    prepare, init = export_llama_lib._prepare_for_llama_export, LLMEdgeManager.__init__
    managers: list = []
    with _keeps_managers(managers), _metadata_kept(metadata), _quiet_stdout():
        first = export_llama_lib._prepare_for_llama_export(config)
        second = export_llama_lib._prepare_for_llama_export(config)
    assert len(managers) == 2 and managers[0] is first and managers[1] is second
    assert first.metadata == {
        "get_max_seq_len": 40, "get_max_context_len": 64, "get_n_layers": 2, "get_vocab_size": 256, "use_kv_cache": True,
        "use_sdpa_with_kv_cache": True, "enable_dynamic_shape": True, "get_bos_id": 0, "get_eos_ids": [1]}
    assert export_llama_lib._prepare_for_llama_export is prepare and LLMEdgeManager.__init__ is init
    assert export_llama_lib._prepare_for_llama_export(config).metadata["get_max_seq_len"] == 64  # upstream's own


def test_upstreams_progress_goes_to_stderr(chat, capsys):
    """What upstream prints ("Checkpoint not provided...") would be in an executor's channel."""
    from executorch.examples.models.llama import export_llama_lib

    with _quiet_stdout():
        export_llama_lib._prepare_for_llama_export(_config(chat["chat_xnnpack"], None))
    printed = capsys.readouterr()
    assert printed.out == "" and "Checkpoint not provided" in printed.err


class Cached(torch.nn.Module):
    """A model of a few tensors: a linear layer, an adapter's (``lora_a``) and a buffer each call
    writes (as a KV cache is written)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(4))
        self.lin = torch.nn.Linear(4, 4)
        self.lora_a = torch.nn.Linear(4, 4, bias=False)

    def forward(self, x):
        self.k_cache.add_(x[0])
        return self.lin(x) + self.lora_a(x) + self.k_cache


def _to_edge():
    """:class:`Cached` through upstream's ``LLMEdgeManager`` up to its edge program, as its LLM export takes a model."""
    from executorch.extension.llm.export.builder import LLMEdgeManager

    torch.manual_seed(0)
    model = Cached()
    manager = LLMEdgeManager(model=model, modelname="cached", max_seq_len=8, use_kv_cache=True, example_inputs=(torch.ones(1, 4),))
    return manager.export().export_to_edge()


def _lora_tag(node) -> str:
    """Each weight's file, as upstream's export tags them: an adapter's into its own."""
    return "chat_lora_story" if "lora" in node.name else "chat_foundation"


@writes_a_buffer
def test_upstreams_manager_counts_its_edge_program_before_emitting_and_saves_through_ptebuild(chat):
    from executorch.extension.llm.export.builder import LLMEdgeManager

    program = chat["chat_lora_story"]
    manager = _to_edge()
    original_emit, original_save = LLMEdgeManager.to_executorch, LLMEdgeManager.save_to_pte
    found: dict = {}
    with _counts_before_emitting(program, found):
        manager.to_executorch(external_constants_tag=_lora_tag)
    assert found["warnings"] == () and manager.export_program is not None
    insight = found["insight"]
    operators = dict(insight.delegation.method("forward").non_delegated)
    # The edge program as lowered: upstream's to_executorch makes linear layers of addmm after.
    assert operators.get("aten_addmm_default") == 1 and "aten_linear_default" not in operators
    assert [t.name for t in insight.method_memory("forward").mutable] == ["k_cache"]
    saved = []
    with _saves_through(saved.append):
        manager.save_to_pte("chat_lora_story.pte")
    assert saved == [manager] and manager.get_saved_pte_filename() == "chat_lora_story.pte"
    with pytest.raises(RuntimeError, match="upstream failed"), _saves_through(saved.append):
        raise RuntimeError("upstream failed")
    assert (LLMEdgeManager.to_executorch, LLMEdgeManager.save_to_pte) == (original_emit, original_save)


@writes_a_buffer
def test_a_lora_program_is_written_with_its_kv_cache_named_and_each_weights_file_keyed_by_sha256(chat, tmp_path):
    manager = _to_edge().to_executorch(external_constants_tag=_lora_tag)
    written = write_program(manager.export_program, chat["chat_lora_story"], FolderOutputs(tmp_path), "chat_lora_story")
    assert written["files"] == {name: tmp_path / name for name in ("chat_lora_story.pte", "chat_foundation.ptd", "chat_lora_story.ptd")}
    assert written["delegated"] == {"forward": 0} and written["mutable_buffers"] == ("k_cache",)
    forward = api.inspect(tmp_path / "chat_lora_story.pte").method("forward")
    assert [(b.name, b.sizes) for b in forward.mutable_buffers] == [("k_cache", (4,))]

    def keys(ptd: str) -> list[tuple[str, str]]:
        return sorted(tuple(k.key.split("@", 1)) for k in api.inspect(tmp_path / ptd).keys)

    assert [name for name, _ in keys("chat_foundation.ptd")] == ["lin.bias", "lin.weight"]
    assert [name for name, _ in keys("chat_lora_story.ptd")] == ["lora_a.weight"]
    assert all(digest.startswith("sha256:") for _, digest in keys("chat_foundation.ptd") + keys("chat_lora_story.ptd"))


@writes_a_buffer
def test_a_program_with_its_weights_inside_still_names_its_kv_cache(chat, tmp_path):
    """No external weights: the key pass serializes nothing again, so the names are serialized here."""
    manager = _to_edge().to_executorch()
    written = write_program(manager.export_program, replace(chat["chat_xnnpack"], data_name=None), FolderOutputs(tmp_path))
    assert list(written["files"]) == ["chat_xnnpack.pte"] and written["mutable_buffers"] == ("k_cache",)
    assert [b.name for b in api.inspect(tmp_path / "chat_xnnpack.pte").method("forward").mutable_buffers] == ["k_cache"]


@writes_a_buffer
def test_a_lora_adapter_that_got_no_weights_is_one_located_line(chat, tmp_path):
    manager = _to_edge().to_executorch(external_constants_tag=lambda _node: "chat_foundation")
    with pytest.raises(BuildError) as refused:
        write_program(manager.export_program, chat["chat_lora_story"], FolderOutputs(tmp_path), "chat_lora_story")
    assert str(refused.value) == (
        "programs.chat_lora_story: ExecuTorch's LLM export wrote no LoRA weights into 'chat_lora_story.ptd' (is the "
        "adapter's target_modules empty?); give the adapter target_modules of the model")


@writes_a_buffer
def test_mutable_buffers_are_named_in_every_method_and_listed_once():
    """Two methods of one model write buffers of the same names (a multi-method program's KV cache)."""
    from executorch.exir import EdgeCompileConfig, to_edge
    from executorch.exir.schema import TensorDataLocation

    class Prefill(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("k_cache", torch.zeros(4))
            self.register_buffer("v_cache", torch.zeros(4))

        def forward(self, x):
            self.k_cache.add_(x[0])
            self.v_cache.add_(x[0])
            return x + self.k_cache + self.v_cache

    class Decode(Prefill):
        def forward(self, x):
            self.v_cache.add_(x[0])
            return x + self.v_cache

    methods = {name: torch.export.export(model, (torch.ones(1, 4),)) for name, model in (("prefill", Prefill()), ("decode", Decode()))}
    program = to_edge(methods, compile_config=EdgeCompileConfig(_check_ir_validity=False)).to_executorch()
    assert name_mutable_buffers(program) == ("v_cache", "k_cache")  # the methods by name: decode's, then prefill's new one
    named = {plan.name: sorted((v.val.extra_tensor_info.fully_qualified_name, v.val.extra_tensor_info.location)
                               for v in plan.values if getattr(v.val, "extra_tensor_info", None) is not None)
             for plan in program._emitter_output.program.execution_plan}
    assert named == {"decode": [("v_cache", TensorDataLocation.SEGMENT)],
                     "prefill": [("k_cache", TensorDataLocation.SEGMENT), ("v_cache", TensorDataLocation.SEGMENT)]}
    assert name_mutable_buffers(to_edge(torch.export.export(torch.nn.Linear(2, 2), (torch.ones(1, 2),))).to_executorch()) == ()


def test_the_dtype_of_each_dtype_override():
    assert [dtype_name(LlmXnnpackOptions(dtype_override=d)) for d in ("fp32", "bf16")] == ["float32", "bfloat16"]


@pytest.mark.parametrize("backend,options,delegates,says", [
    ("xnnpack", {"dtype_override": "bf16"}, 0, "XNNPACK takes bfloat16 operators only with options.enable_bf16 = true"),
    ("xnnpack", {"qmode": "int8"}, 0, "XNNPACK's is qmode '8da4w'"),
    ("xnnpack", {}, 0, "every operator runs in ExecuTorch's portable kernels"),
    ("xnnpack", {"dtype_override": "bf16", "enable_bf16": True}, 3, None),
    ("portable", {}, 0, None),
])
def test_a_program_with_nothing_delegated_to_its_backend_is_warned_about(backend, options, delegates, says):
    """Seen on a SmolLM-shaped model: dtype_override = 'bf16' on XNNPACK built an XNNPACK program
    with no delegate (0.0%), silently; with enable_bf16 8.3% was delegated."""
    from types import SimpleNamespace

    warnings = _undelegated(SimpleNamespace(backend=backend), options_model(backend).model_validate(options),
                            {"forward": delegates})
    if says is None:
        assert warnings == ()
    else:
        (warning,) = warnings
        assert warning.startswith(f"nothing in it was delegated to {backend}") and says in warning, warning


def test_get_max_seq_len_is_what_one_call_takes_and_an_override_is_kept():
    """Upstream writes get_max_seq_len = max_seq_length, one more than a dynamic-shape program takes,
    and ExecuTorch's runner prefills a longer prompt in chunks of that many tokens: every prompt
    longer than the program takes failed ("Attempted to resize a bounded tensor with a maximum
    capacity of 127 elements to 128", seen with max_seq_length 128 and a prompt of 200 tokens). And
    upstream's LLMEdgeManager set it after taking the metadata, so a manifest's override was dropped."""
    from executorch.extension.llm.export.builder import LLMEdgeManager

    from ptebuild.models.executorch_llm.build import prefill_chunk

    spec = {"kind": "executorch-llm", "params": "p.json", "tokenizer": "t.json", "max_seq_length": 128}
    assert prefill_chunk(LlmModelSpec.model_validate(spec)) == {"get_max_seq_len": 127}
    assert prefill_chunk(LlmModelSpec.model_validate({**spec, "enable_dynamic_shape": False})) == {}
    with _metadata_kept({"get_max_seq_len": 100}):
        manager = LLMEdgeManager(model=None, modelname="m", max_seq_len=128, use_kv_cache=True, example_inputs=(),
                                 metadata={"get_max_seq_len": 100, "get_vocab_size": 7})
    assert manager.metadata == {"get_max_seq_len": 100, "get_vocab_size": 7}
    assert LLMEdgeManager(model=None, modelname="m", max_seq_len=128, use_kv_cache=True, example_inputs=(),
                          metadata={"get_max_seq_len": 100}).metadata == {"get_max_seq_len": 128}  # upstream's own


@pytest.mark.slow
def test_the_route_of_backends_upstreams_llm_export_lacks(tmp_path, monkeypatch):
    """CUDA programs take upstream's model and export, then ptebuild's backend lowers and checks
    them (its partitioners, weights file, keys and check). The same route, run here with the
    portable backend standing in for CUDA (which needs the GPU machine), gives a program that its
    backend's check passes and ExecuTorch's runtime loads."""
    from ptebuild.models.executorch_llm import build

    manifest = copy_chat_project(tmp_path / "project")
    manifest.write_text(manifest.read_text() + '\n[programs.chat_portable]\nmodel = "chat"\nbackend = "portable"\n')
    plan = load_manifest(manifest)
    program = next(p for p in plan.programs if p.name == "chat_portable")
    monkeypatch.setattr(build, "PTEBUILD_LOWERED_BACKENDS", ("portable",))
    built = build.build_program(program, manifest.parent, str(manifest), FolderOutputs(tmp_path / "staging"), lambda _: None)
    assert built.check == "executorch-runtime"  # the portable backend's own check, as CUDA's would be
    assert {f.sizes["seq"] for f in built.figures} == {1, 3, 63}
    assert all(f.max_abs_error <= program.atol for f in built.figures)
    assert sorted(built.files) == ["chat_portable.pte", "chat_portable.tokenizer.json"]
    inspection = api.inspect(built.files["chat_portable.pte"])
    assert len(inspection.method("forward").mutable_buffers) == 4
    assert {m.name for m in inspection.methods if m.returns_constant} >= {"get_max_seq_len", "get_bos_id", "get_eos_ids"}


@pytest.mark.slow
def test_portable_vulkan_and_openvino_programs(tmp_path):
    """Portable (upstream's export with no backend enabled): checked by generation. Vulkan (a
    fixed shape: upstream's Vulkan lowering fails with a dynamic one): its backend's structural
    check, ExecuTorch's pip runtime having no Vulkan delegate. OpenVINO (a fixed shape, NNCF's 8-bit
    weights, without which upstream's export fails): checked by generation in ExecuTorch's runtime,
    which finds the openvino package's library (failed before: 'OpenVINO runtime not found')."""
    manifest = copy_chat_project(tmp_path / "project")
    text = manifest.read_text().split("# Float32, XNNPACK")[0]
    text = text.replace("[models.chat]", '[models.chat_static]\nkind = "executorch-llm"\nparams = "chat/params.json"\n'
                        'tokenizer = "chat/tokenizer.json"\nmax_seq_length = 64\nenable_dynamic_shape = false\nseed = 7\n\n[models.chat]')
    text += '[programs.chat_portable]\nmodel = "chat"\nbackend = "portable"\n\n'
    text += '[programs.chat_vulkan]\nmodel = "chat_static"\nbackend = "vulkan"\n\n'
    text += '[programs.chat_openvino]\nmodel = "chat_static"\nbackend = "openvino"\noptions = { pt2e_quantize = "openvino_8wo" }\n'
    manifest.write_text(text)
    done = ptebuild("build", manifest, "--cache", tmp_path / "cache", "--json", "-j1")
    assert done.returncode == 0, done.stderr
    programs = {p["name"]: p for p in json.loads(done.stdout)["targets"]}
    assert programs["chat_portable"]["check"] == "executorch-llm-generation"
    assert programs["chat_portable"]["figures"][1]["tokens_agreed"] == 16
    assert programs["chat_vulkan"]["check"] == "vulkan-structural"
    vulkan = api.inspect(tmp_path / "out" / "chat" / "chat_vulkan.pte")
    assert {d.backend for d in vulkan.method("forward").delegates} == {"VulkanBackend"}
    assert len(vulkan.method("forward").mutable_buffers) == 4
    openvino = programs["chat_openvino"]
    assert openvino["check"] == "executorch-llm-generation" and openvino["figures"][1]["tokens_agreed"] >= 8
    assert openvino["figures"][0]["cosine"] >= 0.99 and openvino["figures"][-1]["runner_tokens"] >= 1
    inspection = api.inspect(tmp_path / "out" / "chat" / "chat_openvino.pte")
    assert {d.backend for d in inspection.method("forward").delegates} == {"OpenvinoBackend"}
