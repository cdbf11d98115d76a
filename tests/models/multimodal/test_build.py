"""manifests/speech.toml built as a user builds it: Voxtral Realtime's three methods in one program
for XNNPACK and for portable, each checked against eager PyTorch (the encoder, the prefill of a
prompt and the audio, 16 greedy decode steps) and in ExecuTorch's MultimodalRunner; the weights in
one .ptd keyed by SHA-256; the KV cache named; a rebuild restored from the cache; and the program
checked against the eager model of other weights named wrong.

Slow (about a minute: two lowerings and the checks); the default run has the fast siblings
(tests/models/multimodal/test_voxtral.py, the bad manifests of tests/manifests/bad-mm-*.toml)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import ptebuild

pytestmark = pytest.mark.slow

MANIFESTS = Path(__file__).resolve().parents[3] / "manifests"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    project = tmp_path_factory.mktemp("speech")
    shutil.copy(MANIFESTS / "speech.toml", project / "speech.toml")
    shutil.copytree(MANIFESTS / "speech", project / "speech")
    (project / "chat").mkdir()
    shutil.copy(MANIFESTS / "chat" / "tokenizer.json", project / "chat" / "tokenizer.json")
    manifest = project / "speech.toml"
    text = manifest.read_text().replace('out = "../out/speech"', 'out = "out"')
    manifest.write_text(text)
    done = ptebuild("build", manifest, "--cache", project / "cache", "--json", "-j1", timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return project, manifest, json.loads(done.stdout)


def test_each_program_is_checked_method_by_method_and_in_the_runner(built):
    _, _, report = built
    targets = {t["name"]: t for t in report["targets"]}
    assert set(targets) == {"asr_xnnpack", "asr_portable"}
    for target in targets.values():
        assert target["status"] == "built"
        figures = target["figures"]
        encoder = next(f for f in figures if f["method"] == "audio_encoder")
        assert encoder["cosine"] > 0.9999 and encoder["max_abs_error"] < 1e-3 and encoder["sizes"] == {"mel_frames": 32}
        stages = {f.get("stage"): f for f in figures if f["method"] == "text_decoder"}
        assert set(stages) == {"prefill", "decode"}
        assert stages["prefill"]["sizes"] == {"prompt_tokens": 8, "audio_positions": 4}
        decode = stages["decode"]
        assert decode["tokens"] == 16 and decode["tokens_agreed"] == 16 and decode["runner_tokens"] >= 1
        assert all(f["verdict"] == "passed" for f in figures)


def test_one_program_of_three_methods_its_weights_in_one_ptd(built):
    project, _, _ = built
    out = project / "out"
    inspected = ptebuild("inspect", "--json", out / "asr_xnnpack.pte")
    assert inspected.returncode == 0, inspected.stderr
    facts = json.loads(inspected.stdout)
    text = json.dumps(facts)
    for method in ("audio_encoder", "token_embedding", "text_decoder", "get_max_seq_len", "get_eos_ids"):
        assert f'"{method}"' in text
    assert "decoder.layers.0.attention.kv_cache.k_cache" in text
    verified = ptebuild("verify", "--bytes", out)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert sorted(p.name for p in out.iterdir() if p.suffix in (".pte", ".ptd", ".json")) == [
        "asr_portable.pte", "asr_portable.tokenizer.json", "asr_portable_weights.ptd",
        "asr_weights.ptd", "asr_xnnpack.pte", "asr_xnnpack.tokenizer.json", "ptebuild.json"]


def test_a_rebuild_is_restored_from_the_cache(built):
    project, manifest, _ = built
    again = ptebuild("build", manifest, "--cache", project / "cache", "--json", "-j1")
    assert again.returncode == 0, again.stderr
    assert {t["status"] for t in json.loads(again.stdout)["targets"]} == {"cached"}


def test_the_program_against_the_eager_model_of_other_weights_is_named_wrong(built):
    from ptebuild.lowering.check import WrongProgram
    from ptebuild.manifest import load_manifest
    from ptebuild.models.executorch_llm.tokenizer import load_tokenizer
    from ptebuild.models.multimodal import voxtral
    from ptebuild.models.multimodal.check import check_multimodal
    from ptebuild.models.multimodal.divergence import locate
    from ptebuild.models.multimodal.spec import MultimodalModelSpec

    project, manifest, _ = built
    plan = load_manifest(manifest)
    program = next(p for p in plan.programs if p.name == "asr_portable")
    other = voxtral.methods_module(voxtral.make_model(project / "speech" / "params.json", None, program.seed + 1, 64, "portable"))
    tokenizer = load_tokenizer(project / "chat" / "tokenizer.json", "speech.toml", "models.asr.tokenizer")
    out = project / "out"
    pte, ptds = out / "asr_portable.pte", [out / "asr_portable_weights.ptd"]
    with pytest.raises(WrongProgram, match="method 'audio_encoder'.*computes something else") as info:
        check_multimodal(other, program, pte, ptds, tokenizer, out / "asr_portable.tokenizer.json",
                         voxtral.cache_buffers(other), voxtral.dims(other.model))
    assert info.value.method == "audio_encoder" and len(info.value.inputs) == 1
    # Lowered again from the eager model of other weights, every operator agrees with PyTorch: the
    # program as built is not that model, and the line says so rather than blaming an operator.
    spec = MultimodalModelSpec.model_validate(program.model_entry)
    located = locate(info.value, other, spec, program, pte, ptds, lambda _line: None)
    assert "every operator of audio_encoder agrees with PyTorch, and the program as built does not" in str(located)
    assert "Each operator's output in ExecuTorch's runtime" in "".join(getattr(located, "__notes__", []))


def test_run_generates_from_a_prompt_and_a_wav_file_in_the_runner(built, tmp_path):
    import math
    import wave

    _, manifest, _ = built
    clip = tmp_path / "clip.wav"
    with wave.open(str(clip), "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(16000)
        file.writeframes(b"".join(int(8000 * math.sin(2 * math.pi * 440 * i / 16000)).to_bytes(2, "little", signed=True)
                                  for i in range(8000)))
    done = ptebuild("run", manifest, "asr_xnnpack", "--audio", clip, "--prompt", "the robot", "--max-new-tokens", "4", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["runner"] == "MultimodalRunner" and result["generated_tokens"] == 4
    assert result["mel_frames"] == 48 and result["audio_seconds"] == 0.5 and result["encoder_seconds"] > 0
    assert result["prompt_tokens"] > 6  # the prompt's tokens and the audio's 6 positions
    printed = ptebuild("run", manifest, "asr_xnnpack", "--audio", clip, "--max-new-tokens", "2")
    assert printed.returncode == 0, printed.stderr[-2000:]
    assert "encoder: 0.50 s of audio (48 mel frames)" in printed.stderr and "(ExecuTorch's MultimodalRunner, greedy)" in printed.stderr
    refused = ptebuild("run", manifest, "asr_xnnpack")
    assert refused.returncode == 2 and refused.stderr.strip().endswith("give --audio FILE (a 16 kHz PCM WAV file)")


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    project = tmp_path_factory.mktemp("split")
    shutil.copy(Path(__file__).parent / "split.toml", project / "split.toml")
    shutil.copytree(MANIFESTS / "speech", project / "speech")
    (project / "chat").mkdir()
    shutil.copy(MANIFESTS / "chat" / "tokenizer.json", project / "chat" / "tokenizer.json")
    done = ptebuild("build", project / "split.toml", "--cache", project / "cache", "--json", "-j1", timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return project, {t["name"]: t for t in json.loads(done.stdout)["targets"]}


def test_an_encoder_file_and_a_decoder_file_share_one_weights_file(split):
    project, targets = split
    encoder, decoder = targets["asr_encoder"], targets["asr_decoder"]
    assert [f["method"] for f in encoder["figures"]] == ["audio_encoder"]
    assert {(f["method"], f.get("stage")) for f in decoder["figures"]} == {("text_decoder", "prefill"), ("text_decoder", "decode")}
    decode = next(f for f in decoder["figures"] if f.get("stage") == "decode")
    assert decode["tokens_agreed"] == 16 and decode["runner_tokens"] >= 1  # the runner, from the prompt alone
    out = project / "out"
    assert not (out / "asr_encoder_weights.ptd").exists() and (out / "asr_shared_weights.ptd").is_file()
    for name, methods in (("asr_encoder", {"audio_encoder"}), ("asr_decoder", {"token_embedding", "text_decoder"})):
        facts = json.loads(ptebuild("inspect", "--json", out / f"{name}.pte").stdout)
        text = json.dumps(facts)
        assert all(f'"{m}"' in text for m in methods)
        assert all(f'"{m}"' not in text for m in {"audio_encoder", "token_embedding", "text_decoder"} - methods)
    assert ptebuild("verify", "--bytes", out).returncode == 0


def test_an_8da4w_program_is_checked_against_torchaos_quantized_eager_model(split):
    project, targets = split
    program = targets["asr_8da4w"]
    assert program["status"] == "built"
    decode = next(f for f in program["figures"] if f.get("stage") == "decode")
    assert decode["atol"] == 5e-2 and decode["min_token_agreement"] == 0.5
    out = project / "out"  # its linears' weights are 4-bit: its weights file is smaller than the float one
    assert (out / "asr_8da4w_weights.ptd").stat().st_size < (out / "asr_shared_weights.ptd").stat().st_size
    # Every linear of the encoder, the adapter and the decoder is 4-bit, but for the time conditioning's
    # 8 input features (skip_ungroupable) and the output layer tied to the embedding: each said so.
    inspected = ptebuild("inspect", out / "asr_8da4w.pte").stdout
    assert "weights: 32 quantized (int4)" in inspected, inspected
    kept = [line for line in inspected.splitlines() if line.strip().startswith("float:")]
    assert any("ada_rms_norm_t_cond.2.weight float32[64, 8]" in line for line in kept)
    assert not any("kv_cache" in line for line in kept)  # the KV cache is state, not a weight
