"""The ``executorch-llm`` model kind, built for real: ``manifests/chat.toml`` (a tiny Llama-3-style
decoder, float32 and 8da4w XNNPACK programs) through ExecuTorch's own LLM export, checked by
generation and in ExecuTorch's TextLLMRunner, then inspected, restored, run, packed and verified.

The build is shared by the session (``chat_build`` in ``tests/conftest.py``); the slow tests build
a decoder of SmolLM2-135M's dimensions.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import first_program_inputs, ptebuild
from project_copy import copy_chat_project

import ptebuild as api
from ptebuild.errors import LoadError

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ("chat_xnnpack", "chat_xnnpack_8da4w")


def _programs(document: dict) -> dict[str, dict]:
    return {p["name"]: p for p in document["targets"]}


def test_chat_programs_build_and_pass_the_generation_check(chat_build):
    manifest, _, _, code, document, stderr = chat_build
    assert code == 0, stderr
    programs = _programs(document)
    for name in PROGRAMS:
        program = programs[name]
        assert program["status"] == "built"
        assert program["check"] == "executorch-llm-generation"
        prefill, decode = program["figures"]
        assert prefill["stage"] == "prefill" and prefill["sizes"] == {"prompt_tokens": 16}
        assert decode["stage"] == "decode" and decode["tokens"] == 16
        assert decode["runner_tokens"] >= 1  # ExecuTorch's TextLLMRunner generated, and matched the program
        names = sorted(Path(o["path"]).name for o in program["outputs"])
        assert names == sorted([f"{name}.pte", f"{name}_weights.ptd", f"{name}.tokenizer.json"])
    float_check = programs["chat_xnnpack"]["figures"]
    assert float_check[0]["max_abs_error"] <= 1e-3 and float_check[0]["cosine"] >= 0.9999
    assert float_check[1]["tokens_agreed"] == 16  # a float program agrees on every step
    quantized = programs["chat_xnnpack_8da4w"]["figures"]
    assert quantized[1]["tokens_agreed"] >= quantized[1]["min_token_agreement"] * 16
    assert "tokens 16/16" in ptebuild("build", manifest, "--cache", chat_build[2]).stdout


def test_the_tokenizer_is_written_beside_each_program(chat_build):
    _, out, *_ = chat_build
    declared = (ROOT / "manifests" / "chat" / "tokenizer.json").read_bytes()
    for name in PROGRAMS:
        assert (out / f"{name}.tokenizer.json").read_bytes() == declared


def test_inspect_lists_the_kv_cache_and_the_metadata_values(chat_build):
    _, out, *_ = chat_build
    inspection = api.inspect(out / "chat_xnnpack.pte")
    forward = inspection.method("forward")
    assert [(b.name, b.dtype, b.sizes) for b in forward.mutable_buffers] == [
        (f"layers.{layer}.attention.kv_cache.{cache}", "float32", (1, 64, 2, 16))
        for layer in (0, 1) for cache in ("k_cache", "v_cache")
    ]
    metadata = {m.name: m.constant for m in inspection.methods if m.returns_constant}
    assert metadata == {
        # The most tokens one call takes (max_seq_length - 1 with a dynamic shape; upstream writes 64).
        "get_max_seq_len": 63, "get_max_context_len": 64, "get_n_layers": 2, "get_vocab_size": 256,
        "use_kv_cache": True, "use_sdpa_with_kv_cache": True, "enable_dynamic_shape": True,
        "get_bos_id": 0, "get_eos_ids": 1,  # one id: ExecuTorch emits a one-item list as its int
    }
    text = ptebuild("inspect", out / "chat_xnnpack.pte").stdout
    assert "layers.1.attention.kv_cache.v_cache  float32[1, 64, 2, 16]" in text
    assert "returns: 256 (a constant: metadata)" in text


def test_weights_are_keyed_by_sha256_and_a_pte_refuses_another_programs_ptd(chat_build):
    _, out, *_ = chat_build
    keys = api.inspect(out / "chat_xnnpack_weights.ptd").keys
    assert keys and all("@sha256:" in k.key or len(k.key) == 64 for k in keys)
    assert any(k.key.startswith("tok_embeddings.weight@sha256:") for k in keys)  # a portable constant, rekeyed
    from ptebuild.runtime import check

    check(out / "chat_xnnpack.pte", [out / "chat_xnnpack_weights.ptd"], verify_bytes=True)
    with pytest.raises(LoadError, match="chat_xnnpack.pte"):
        check(out / "chat_xnnpack.pte", [out / "chat_xnnpack_8da4w_weights.ptd"])


def test_a_second_build_restores_from_the_cache(chat_build, tmp_path):
    manifest, out, cache, *_ = chat_build
    again = tmp_path / "again"
    done = ptebuild("build", manifest, "--cache", cache, "--out", again, "--json")
    assert done.returncode == 0, done.stderr
    assert {p["status"] for p in json.loads(done.stdout)["targets"]} == {"cached"}
    for name in out.iterdir():
        if name.is_file() and name.name != "ptebuild.json":
            assert (again / name.name).read_bytes() == name.read_bytes(), name.name


def test_run_generates_text_through_the_runner_and_times_it(chat_build):
    manifest, out, *_ = chat_build
    done = ptebuild("run", manifest, "chat_xnnpack", "--out", out, "--prompt", "The robot", "--max-new-tokens", "8", "--json")
    assert done.returncode == 0, done.stderr
    generation = json.loads(done.stdout)  # nothing else on stdout: the runner's own printing goes to stderr
    assert generation["prompt"] == "The robot" and generation["program"] == "chat_xnnpack"
    assert 1 <= generation["generated_tokens"] <= 8 and generation["text"]
    assert generation["prefill_tokens_per_second"] > 0 and generation["decode_tokens_per_second"] > 0


def test_run_prints_the_text_and_the_speed(chat_build, capsys):
    from ptebuild.cli import main

    manifest, out, *_ = chat_build
    assert main(["run", str(manifest), "chat_xnnpack_8da4w", "--out", str(out), "--max-new-tokens", "4"]) == 0
    printed = capsys.readouterr()
    assert printed.out.splitlines()[1].startswith("Once upon a time")  # the default prompt, then the text
    assert "tokens/s" in printed.err and "decode: 4 tokens" in printed.err


def test_prompt_for_a_program_that_is_not_a_language_model(tiny_project):
    done = ptebuild("run", tiny_project, "tiny_portable", "--prompt", "hello")
    assert done.returncode == 2
    assert "is not a language model (factory model); --prompt is for programs of executorch-llm models" in done.stderr


def test_bundles_carry_the_tokenizer_and_verify(chat_build, tmp_path):
    manifest, out, *_ = chat_build
    archive = tmp_path / "chat.tar.gz"
    done = ptebuild("pack", manifest, "--out", out, "-o", archive)
    assert done.returncode == 0, done.stderr
    with tarfile.open(archive) as tar:
        names = {Path(n).name for n in tar.getnames()}
    assert {"chat_xnnpack.tokenizer.json", "chat_xnnpack_8da4w.tokenizer.json", "chat_xnnpack_weights.ptd"} <= names
    assert ptebuild("verify", archive).returncode == 0


def test_the_key_covers_params_tokenizer_and_checkpoint_by_content(tmp_path):
    from ptebuild.builder.keys import action_key, explain_changes

    manifest = copy_chat_project(tmp_path / "project")

    def inputs() -> dict[str, str]:
        return first_program_inputs(manifest)

    before = inputs()
    tokenizer = manifest.parent / "chat" / "tokenizer.json"
    tokenizer.write_bytes(tokenizer.read_bytes().replace(b'"ver', b'"Ver', 1))
    after = inputs()
    assert action_key(after) != action_key(before)
    assert explain_changes(before, after) == ["source file chat/tokenizer.json changed"]
    params = manifest.parent / "chat" / "params.json"
    params.write_text(params.read_text().replace('"norm_eps": 1e-05', '"norm_eps": 1e-06'))
    assert explain_changes(after, inputs()) == ["source file chat/params.json changed"]
    torch_free = inputs()
    (manifest.parent / "chat" / "weights.pth").write_bytes(b"a checkpoint's bytes")
    manifest.write_text(manifest.read_text().replace('seed = 20261203', 'seed = 20261203\ncheckpoint = "chat/weights.pth"'))
    assert "weights file chat/weights.pth added" in explain_changes(torch_free, inputs())


def test_a_tokenizer_larger_than_the_vocabulary_is_one_located_line(tmp_path):
    manifest = copy_chat_project(tmp_path / "project")
    params = manifest.parent / "chat" / "params.json"
    params.write_text(params.read_text().replace('"vocab_size": 256', '"vocab_size": 200'))
    done = ptebuild("build", manifest, "--only", "chat_xnnpack", "--cache", tmp_path / "cache")
    assert done.returncode == 2, done.stderr
    assert (
        f"error: {manifest}: models.chat.tokenizer: tokenizer.json (a Hugging Face tokenizer.json) has 256 tokens, and "
        "the model's vocab_size (chat/params.json) is 200: its ids would index past the embedding table; give the "
        "model's own tokenizer or a vocab_size that holds it"
    ) in done.stderr
    assert "Traceback" not in done.stderr


def test_a_checkpoint_that_does_not_fit_the_params_is_one_located_line(tmp_path):
    """A checkpoint of another model (here: two of its tensors) fails in upstream's model: the
    line is at models.chat.checkpoint, with upstream's words (exit 2, like a factory's weights)."""
    import torch

    manifest = copy_chat_project(tmp_path / "project")
    torch.save({"tok_embeddings.weight": torch.zeros(256, 64), "norm.weight": torch.ones(64)},
               manifest.parent / "chat" / "partial.pth")
    manifest.write_text(manifest.read_text().replace('seed = 20261203', 'seed = 20261203\ncheckpoint = "chat/partial.pth"'))
    done = ptebuild("build", manifest, "--only", "chat_xnnpack", "--cache", tmp_path / "cache")
    assert done.returncode == 2, done.stderr
    assert (
        f"error: {manifest}: models.chat.checkpoint: 'chat/partial.pth' does not fit the model (chat/params.json, "
        "model_class llama3): ValueError: The provided checkpoint is missing the following weights"
    ) in done.stderr
    assert "give a checkpoint in ExecuTorch's Llama layout" in done.stderr and "Traceback" not in done.stderr


def test_a_program_of_other_weights_fails_the_generation_check(chat_build, tmp_path):
    """The check names a wrong program as wrong (issue 26's vocabulary, never advice to loosen the
    check): the built chat program against the eager model of another seed fails at the prefill,
    with its figures and tolerance; the program run with a KV cache it cannot use (every decode
    step at position 0, as a runner that mishandles positions) fails at the decode, its tokens
    counted; against its own seed it passes, calling the eager model once, and ExecuTorch's
    TextLLMRunner agrees."""
    import torch
    from executorch.runtime import Runtime

    from ptebuild.errors import CheckError
    from ptebuild.lowering.check import WrongProgram
    from ptebuild.models.executorch_llm.generation import check_generation, check_in_runner
    from ptebuild.models.executorch_llm.native_output import register_llm_kernels

    _, out, *_ = chat_build
    program, shape, tokenizer, buffers, floor, (pte, ptds), eager = _chat_check_inputs(chat_build, tmp_path)
    with pytest.raises(WrongProgram) as refused:
        check_generation(eager(program.seed + 1), program, shape, pte, ptds, tokenizer, buffers, floor)
    message = str(refused.value)
    assert "the prefill of a seeded prompt of 16 token ids" in message, message
    assert "the program computes something else than eager PyTorch" in message and "not a tolerance problem" in message
    assert "max abs error" in message and "cosine" in message
    assert "if this error is expected" not in message  # no advice to loosen the check

    ours = eager(program.seed)
    register_llm_kernels()
    method = Runtime.get().load_program(pte, data_path=ptds[0]).load_method("forward")

    def forgetful(inputs):  # decode steps written and read at position 0: the KV cache's context is lost
        tokens, position = inputs
        return method.execute([tokens, torch.zeros_like(position) if tokens.shape[1] == 1 else position])

    with pytest.raises(WrongProgram, match=r"greedy decoding .* the program computes something else than eager PyTorch") as refused:
        check_generation(ours, program, shape, pte, ptds, tokenizer, buffers, floor, execute=forgetful)
    assert "if this error is expected" not in str(refused.value)

    # The eager side knows every token in advance (the program's greedy ones): one call over the
    # prompt and the 16 decoded tokens gives each step's logits (an eager 8da4w model dequantizes
    # all its weights in every call: seconds a call at 1B; 17 calls before).
    calls = []
    hook = ours.register_forward_pre_hook(lambda module, args: calls.append(args[0].shape[-1]))
    agreement = check_generation(ours, program, shape, pte, ptds, tokenizer, buffers, floor)
    hook.remove()
    assert calls == [16 + 16]
    prefill, decode = agreement.figures
    assert decode.tokens_agreed == 16 and (prefill.stage, decode.stage) == ("prefill", "decode")
    # The figures state the tolerance and the data: a seeded prompt of 16 ids, 16 greedy steps.
    assert (prefill.atol, prefill.rtol, prefill.min_cosine, prefill.dtype) == (1e-3, 1e-4, 0.9999, "float32")
    assert prefill.sizes == {"prompt_tokens": 16} and prefill.prompt_seed == program.seed
    assert decode.sizes == {"decode_steps": 16} and decode.verdict == prefill.verdict == "passed"
    assert check_in_runner(program, pte, ptds, out / "chat_xnnpack.tokenizer.json", agreement) == agreement.tokens
    wrong = replace(agreement, continuation=b"something else")
    with pytest.raises(CheckError, match=r"ExecuTorch's TextLLMRunner generated '.*' from 'Once upon a time', the program run step by step 'something else'"):
        check_in_runner(program, pte, ptds, out / "chat_xnnpack.tokenizer.json", wrong)


def test_the_runner_prints_a_lone_byte_piece_only_where_it_is_printable_and_its_text_ends_before_its_stats():
    """The fast sibling of the next test: what ExecuTorch's runner prints for a piece (its
    safe_printf), and the generated text read back from what it printed."""
    from ptebuild.models.executorch_llm.native_output import Printed, printed

    assert [printed(p) for p in (b"a", b" ", b"\n", b"\x87", b"\x01", b"\xc3\xa9", b"\xe4\xbd", b"ab\0c", b"")] == [
        b"a", b" ", b"\n", b"", b"", b"\xc3\xa9", b"\xe4\xbd", b"ab", b""]
    out = Printed()
    out.output = b' time\xe4\xbd\n\nPyTorchObserver {"prompt_tokens":4}\n'
    assert out.text == b" time\xe4\xbd\n"  # the text's own newline kept, the runner's dropped
    out.output = b"no stats"
    assert out.text == b"no stats"


@pytest.mark.slow
def test_a_byte_level_tokenizer_with_pieces_of_characters_and_a_padded_vocabulary(chat_build, tmp_path):
    """Every real byte-level tokenizer has pieces that are one byte of a character. Before, the
    check of a right program failed with "UnicodeDecodeError: 'utf-8' codec can't decode byte 0x87"
    (the tokenizer binding, and the runner's Python token callback, hand pieces over as str), and
    so did ``ptebuild run``. Now the runner's text is what it prints, compared as bytes. A
    tokenizer smaller than the model's vocab_size (a padded vocabulary) was refused when the random
    model picked an id it has no piece for ("give the model's own tokenizer"); now the runner is
    asked for the tokens before it, and the check says so."""
    from byte_tokenizer import write_byte_level

    from ptebuild.models.executorch_llm.generation import check_generation, check_in_runner
    from ptebuild.models.executorch_llm.tokenizer import load_tokenizer

    program, shape, _, buffers, floor, (pte, ptds), eager = _chat_check_inputs(chat_build, tmp_path)
    model = eager(program.seed)
    whole = write_byte_level(tmp_path / "tokenizer.json")
    tokenizer = load_tokenizer(whole, "chat.toml", "models.chat.tokenizer")
    agreement = check_generation(model, program, shape, pte, ptds, tokenizer, buffers, floor)
    assert agreement.note == "" and agreement.tokens == 8
    # Every piece is one byte; the runner leaves out those that are not printable ASCII or
    # whitespace (its safe_printf): bytes from 0x80 up, which the random model picked.
    assert len(agreement.continuation) < agreement.tokens, agreement.continuation
    assert check_in_runner(program, pte, ptds, whole, agreement) == 8

    padded = load_tokenizer(write_byte_level(tmp_path / "padded" / "tokenizer.json", size=120), "chat.toml",
                            "models.chat.tokenizer")
    agreement = check_generation(model, program, shape, pte, ptds, padded, buffers, floor)
    assert agreement.tokens < 8 and "has no piece for" in agreement.note, agreement
    assert check_in_runner(program, pte, ptds, padded.path, agreement) == agreement.tokens


def test_the_runner_emits_the_eos_it_stops_at_and_never_stops_at_the_prefills_token():
    """What ExecuTorch's TextLLMRunner prints, greedily (text_llm_runner.cpp, text_token_generator.h):
    the prefill's token whatever it is, then each token until one is an EOS id, that one included.
    Before: the expected continuation left the EOS out (and stopped at an EOS from the prefill), so
    a right program whose greedy text reached its EOS failed the check (found with a tiny qwen2_5)."""
    import torch

    from ptebuild.models.executorch_llm.generation import greedy_as_the_runner

    following = {7: 3, 3: 9, 9: 2, 2: 5, 5: 5}  # the token each fed token leads to

    def feed(tokens):
        return torch.nn.functional.one_hot(torch.tensor(following[tokens[-1]]), 10).float()

    assert greedy_as_the_runner(feed, [1, 7], 8, stops=set()) == [3, 9, 2, 5, 5, 5, 5, 5]
    assert greedy_as_the_runner(feed, [1, 7], 8, stops={2}) == [3, 9, 2]  # the EOS is printed, then it stops
    assert greedy_as_the_runner(feed, [1, 7], 8, stops={3}) == [3, 9, 2, 5, 5, 5, 5, 5]  # the prefill's is not tested
    assert greedy_as_the_runner(feed, [1, 7], 1, stops=set()) == [3]


@pytest.mark.slow
def test_a_program_whose_greedy_text_reaches_its_eos_passes_the_runner_check(tmp_path):
    """Every id is an EOS id (get_eos_ids): the runner prints the prefill's token and the next one,
    and stops. Failed before: the continuation expected was empty."""
    import json

    manifest = copy_chat_project(tmp_path / "project")
    eos = f"metadata = {{ get_eos_ids = {list(range(256))} }}"
    manifest.write_text(manifest.read_text().replace("seed = 20261203", "seed = 20261203\n" + eos, 1))
    done = ptebuild("build", manifest, "--only", "chat_xnnpack", "--cache", tmp_path / "cache", "--json")
    assert done.returncode == 0, done.stderr
    (target,) = json.loads(done.stdout)["targets"]
    assert target["figures"][-1]["runner_tokens"] == 2


def _chat_check_inputs(chat_build, tmp_path):
    """What :func:`check_generation` takes for the built ``chat_xnnpack``, and ``eager(seed)``:
    upstream's eager model of the chat params with the random weights of ``seed``."""
    from ptebuild.manifest import load_manifest
    from ptebuild.models.executorch_llm import token_agreement_floor
    from ptebuild.models.executorch_llm.build import random_checkpoint
    from ptebuild.models.executorch_llm.eager_reference import Shape
    from ptebuild.models.executorch_llm.export import llm_config
    from ptebuild.models.executorch_llm.spec import LlmModelSpec, LlmXnnpackOptions
    from ptebuild.models.executorch_llm.tokenizer import load_tokenizer

    manifest, out, *_ = chat_build
    program = next(p for p in load_manifest(manifest).programs if p.name == "chat_xnnpack")
    spec = LlmModelSpec.model_validate(program.model_entry)
    options = LlmXnnpackOptions.model_validate(program.options)

    def eager(seed: int):
        from executorch.examples.models.llama.export_llama_lib import _prepare_for_llama_export

        checkpoint = random_checkpoint(spec, manifest.parent, seed, tmp_path)
        config = llm_config(spec.model_copy(update={"checkpoint": str(checkpoint)}), options, program, manifest.parent, {}, None)
        return _prepare_for_llama_export(config).model

    tokenizer = load_tokenizer(manifest.parent / "chat" / "tokenizer.json", str(manifest), "models.chat.tokenizer")
    buffers = tuple(f"layers.{i}.attention.kv_cache.{c}" for i in (0, 1) for c in ("k_cache", "v_cache"))
    files = (out / "chat_xnnpack.pte", [out / "chat_xnnpack_weights.ptd"])
    return program, Shape(True, True, 64, 64), tokenizer, buffers, token_agreement_floor(program), files, eager


def test_one_eager_call_over_the_sequence_gives_the_logits_of_its_steps(chat_build, tmp_path):
    """What makes the single call right: its rows are the logits the step-by-step calls through the
    eager model's KV cache give (the same prefix at each position), to float32's rounding."""
    import torch

    from ptebuild.models.executorch_llm.eager_reference import eager_logits, takes_whole_sequence

    program, shape, _, buffers, *_, eager = _chat_check_inputs(chat_build, tmp_path)
    model = eager(program.seed)
    generator = torch.Generator().manual_seed(7)
    prompt, fed = (torch.randint(0, 256, (n,), generator=generator).tolist() for n in (16, 16))
    assert takes_whole_sequence(model, shape, 32)
    whole = eager_logits(model, buffers, shape, prompt, fed, whole=True)
    steps = eager_logits(model, buffers, shape, prompt, fed, whole=False)
    assert len(whole) == len(steps) == 17 and model.generate_full_logits is False
    for one, other in zip(whole, steps, strict=True):
        assert float((one - other).abs().max()) <= 1e-4 * float(other.abs().max())
        assert int(one.argmax()) == int(other.argmax())


def test_a_cache_of_other_values_or_a_fixed_sequence_is_called_step_by_step():
    """A quantized, ring or attention-sink KV cache, KV-sharing layers, a program of a fixed
    sequence, a sequence past the program's bound, or a model that cannot give every position's
    logits: the eager model is called as the program is."""
    from torch import nn

    from ptebuild.models.executorch_llm.eager_reference import Shape, takes_whole_sequence

    def model(cache: str = "KVCache", full=False, shared=0):
        layer = type(cache, (nn.Module,), {})()
        module = nn.Sequential(nn.Sequential(layer))
        if full is not None:
            module.generate_full_logits = full
        module.num_kv_shared_layers = shared
        return module

    dynamic = Shape(True, True, 64, 128)
    assert takes_whole_sequence(model(), dynamic, 32) and takes_whole_sequence(model("CustomKVCache"), dynamic, 63)
    assert takes_whole_sequence(model(), Shape(False, True, 64, 64), 32)  # no KV cache: each call takes the sequence
    assert not takes_whole_sequence(model(), dynamic, 64)  # past max_seq_length - 1
    assert not takes_whole_sequence(model(), Shape(True, False, 64, 128), 32)
    for cache in ("QuantizedKVCache", "RingKVCache", "CustomRingKVCache", "KVCacheWithAttentionSink"):
        assert not takes_whole_sequence(model(cache), dynamic, 32), cache
    assert not takes_whole_sequence(model(shared=2), dynamic, 32)
    assert not takes_whole_sequence(model(full=None), dynamic, 32)


@pytest.mark.slow
def test_a_decoder_of_smollm2_135m_dimensions_builds_float_and_8da4w(tmp_path):
    """SmolLM2-135M's shape (30 layers, 576 wide, 9/3 heads, vocab 49152), random weights, with a
    made tokenizer of 49152 ASCII pieces (a random model generates any id of its vocabulary)."""
    import subprocess
    import sys

    project = tmp_path / "project"
    shutil.copytree(Path(__file__).parent / "smollm2", project / "smollm2")
    shutil.copy(Path(__file__).parent / "smollm2.toml", project / "smollm2.toml")
    subprocess.run([sys.executable, project / "smollm2" / "make_tokenizer.py", project / "smollm2" / "tokenizer.json", "49152"],
                   check=True)
    # Two exports through upstream's pipeline, one after the other: 588 s on CI, over 900 s (the
    # helper's default limit, there for hangs) on a slower day of this shared machine.
    done = ptebuild("build", project / "smollm2.toml", "--cache", tmp_path / "cache", "--json", "-j1", timeout=2400)
    assert done.returncode == 0, done.stderr
    programs = _programs(json.loads(done.stdout))
    for name in ("smol_xnnpack", "smol_xnnpack_8da4w"):
        _, decode = programs[name]["figures"]
        assert decode["runner_tokens"] >= 1
        print(name, programs[name]["seconds"], "s:", json.dumps(programs[name]["figures"]))  # the figures, with -s
    assert programs["smol_xnnpack"]["figures"][1]["tokens_agreed"] == 16
    inspection = api.inspect(project / "out" / "smol_xnnpack.pte")
    assert len(inspection.method("forward").mutable_buffers) == 60
    assert {m.name: m.constant for m in inspection.methods if m.returns_constant}["get_vocab_size"] == 49152
    digest = hashlib.sha256((project / "out" / "smol_xnnpack_weights.ptd").read_bytes()).hexdigest()
    assert digest == next(o["sha256"] for o in programs["smol_xnnpack"]["outputs"] if o["path"].endswith(".ptd"))


@pytest.mark.slow
def test_the_route_of_backends_upstreams_llm_export_lacks(tmp_path, monkeypatch):
    """CUDA programs take upstream's model and export, then ptebuild's backend lowers and checks
    them (its partitioners, weights file, keys and check). The same route, run here with the
    portable backend standing in for CUDA (which needs the GPU machine), gives a program that its
    backend's check passes and ExecuTorch's runtime loads."""
    from ptebuild.manifest import load_manifest
    from ptebuild.models.base import FolderOutputs
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
    programs = _programs(json.loads(done.stdout))
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


def test_each_program_says_what_is_inside_it(chat_build):
    """What is inside an LLM program (issue 29), in the report and the record: the delegation
    counted on the edge program upstream's LLM export lowered (before it is emitted), the KV
    cache as mutable buffers, the planned memory and the size split with its .ptd."""
    _, out, _, code, document, stderr = chat_build
    assert code == 0, stderr
    record = json.loads((out / "ptebuild.json").read_text())["targets"]
    for name in PROGRAMS:
        program = _programs(document)[name]
        forward = program["delegation"]["methods"]["forward"]
        # Upstream's XNNPACK partitioner takes the linear layers; the attention (custom SDPA, the
        # KV cache update) and the dynamic shape's scalar arithmetic stay with the kernels.
        assert forward["delegated"]["XnnpackBackend"]["operators"].get("aten_linear_default", 0) >= 14, forward
        assert "aten_linear_default" not in forward["non_delegated"] and 0 < forward["fraction"] < 0.5, forward
        memory = program["memory"]["forward"]
        assert [(t["name"], t["shape"]) for t in memory["mutable"]] == [
            (f"layers.{layer}.attention.kv_cache.{cache}", [1, 64, 2, 16]) for layer in (0, 1) for cache in ("k_cache", "v_cache")]
        assert memory["planned_bytes"] > 0
        assert [p["name"] for p in program["size"]["ptd"]] == [f"{name}_weights.ptd"]
        assert record[name]["insight"]["delegation"] == program["delegation"]


@pytest.mark.slow
def test_the_recorded_delegation_is_get_delegation_infos(chat_build, monkeypatch, tmp_path):
    """The chat program built again in this process, ExecuTorch's own ``get_delegation_info`` run
    on the edge program upstream's LLM export lowered (as it hands it to ``to_executorch``),
    compared node for node with what the build recorded (the fast sibling is above)."""
    from delegation_check import compare
    from executorch.devtools.backend_debug import get_delegation_info
    from executorch.extension.llm.export.builder import LLMEdgeManager

    from ptebuild.backends import bind_program
    from ptebuild.insight.delegation import Delegation
    from ptebuild.manifest import load_manifest
    from ptebuild.models import get_model_kind, options_model_of
    from ptebuild.models.factory.lower import StoredOutputs
    from ptebuild.store.cas import CAS

    manifest, out, *_ = chat_build
    infos = []
    original = LLMEdgeManager.to_executorch

    def recording(self, *args, **kwargs):
        infos.append({m: get_delegation_info(self.edge_manager.exported_program(m).graph_module) for m in self.edge_manager.methods})
        return original(self, *args, **kwargs)

    monkeypatch.setattr(LLMEdgeManager, "to_executorch", recording)
    plan = load_manifest(manifest)
    program = bind_program(next(p for p in plan.programs if p.name == "chat_xnnpack"), options_model_of)
    from ptebuild.insight.stages import StageClock
    from ptebuild.models.base import BuildJob

    store = CAS(tmp_path / "store")
    outputs = StoredOutputs(store, tmp_path / "files")
    job = BuildJob(program=program, manifest_dir=manifest.parent, display=str(manifest), outputs=outputs,
                   progress=lambda _text: None, stages=StageClock(), store=store, folder=tmp_path / "files")
    built = get_model_kind(program.kind).build(job)
    recorded = json.loads((out / "ptebuild.json").read_text())["targets"]["chat_xnnpack"]["insight"]["delegation"]
    (found,) = infos
    rows = compare(Delegation.from_json(recorded), found)
    assert rows[0][1][0] >= 14  # the linear layers, delegated
    assert built.insight is not None and built.insight.delegation == Delegation.from_json(recorded)


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

    from ptebuild.models.executorch_llm.export import _undelegated
    from ptebuild.models.executorch_llm.spec import options_model

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
    from ptebuild.models.executorch_llm.export import _metadata_kept
    from ptebuild.models.executorch_llm.spec import LlmModelSpec

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
def test_a_prompt_longer_than_one_call_takes_is_prefilled_in_chunks_by_the_runner(tmp_path):
    """The runner splits a prompt of 29 tokens for a program that takes 15 a call (max_seq_length
    16, a KV cache of 64): it failed before (chunks of 16)."""
    manifest = copy_chat_project(tmp_path / "project")
    manifest.write_text(manifest.read_text().replace("max_seq_length = 64", "max_seq_length = 16", 1))
    done = ptebuild("build", manifest, "--only", "chat_xnnpack", "--cache", tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    prompt = "Once upon a time there was a small robot that lived in a workshop by the sea."
    done = ptebuild("run", manifest, "chat_xnnpack", "--prompt", prompt, "--max-new-tokens", "4", "--json")
    assert done.returncode == 0, done.stderr
    generation = json.loads(done.stdout)
    assert generation["prompt_tokens"] == 29 and generation["generated_tokens"] == 4  # two chunks of 15 and 14


def test_run_asks_the_runner_for_no_more_tokens_than_its_kv_cache_holds(chat_build, capsys):
    """ExecuTorch 1.5.1's runner does not bound max_new_tokens by the KV cache: asked for more than
    fit after the prompt, it failed in a kernel ("arg 0 with type id 1; arg 1 with type id 8").
    ptebuild asks for what fits, and says so. (In this process: the CLI's own process is
    test_run_generates_text_through_the_runner_and_times_it's.)"""
    from ptebuild.cli import main

    manifest, out, *_ = chat_build
    code = main(["run", str(manifest), "chat_xnnpack", "--out", str(out), "--prompt", "The robot", "--max-new-tokens", "200", "--json"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    generation = json.loads(printed.out)
    room = 64 - generation["prompt_tokens"] + 1  # the cache holds the prompt and every new token but the last
    assert generation["generated_tokens"] <= room < 200
    assert "note: chat_xnnpack: 200 new tokens do not fit the KV cache after this prompt" in printed.err
    assert generation["note"].endswith(f"generating {room}")
