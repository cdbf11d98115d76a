"""Voxtral Realtime from ExecuTorch's own definition: random weights in upstream's checkpoint layout
(every weight under the key upstream's loader maps to it, the same bytes from the same seed), a
checkpoint that lacks weights refused naming them, and the audio's bound set for the export only."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ptebuild.errors import ManifestError

torch = pytest.importorskip("torch")
pytest.importorskip("executorch.examples.models.voxtral_realtime.model")

from ptebuild.models.multimodal import voxtral

PARAMS = Path(__file__).resolve().parents[3] / "manifests" / "speech" / "params.json"


def test_every_random_weight_is_saved_under_the_key_upstreams_loader_maps_to_it(tmp_path):
    from executorch.examples.models.voxtral_realtime.model import _map_checkpoint_key
    from safetensors import safe_open

    path = tmp_path / "consolidated.safetensors"
    voxtral.random_checkpoint(PARAMS, 3, 32, "xnnpack", path)
    with safe_open(str(path), framework="pt") as saved:
        keys = list(saved.keys())
    assert keys and all(_map_checkpoint_key(key) is not None for key in keys)
    model = voxtral.make_model(PARAMS, None, 3, 32, "xnnpack")
    loaded = {name for name, _ in model.named_parameters()}
    assert {_map_checkpoint_key(key) for key in keys} >= loaded - {"decoder.output.weight"}


def test_the_same_seed_makes_the_same_weights_and_another_seed_others(tmp_path):
    paths = [tmp_path / f"{i}.safetensors" for i in range(3)]
    for path, seed in zip(paths, (7, 7, 8), strict=True):
        voxtral.random_checkpoint(PARAMS, seed, 32, "xnnpack", path)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert paths[0].read_bytes() != paths[2].read_bytes()


def test_a_model_from_its_own_checkpoint_equals_the_one_made_from_the_seed(tmp_path):
    path = tmp_path / "consolidated.safetensors"
    voxtral.random_checkpoint(PARAMS, 5, 32, "xnnpack", path)
    from_file = voxtral.make_model(PARAMS, path, 0, 32, "xnnpack").state_dict()
    from_seed = voxtral.make_model(PARAMS, None, 5, 32, "xnnpack").state_dict()
    assert from_file.keys() == from_seed.keys()
    assert all(torch.equal(from_file[k], from_seed[k]) for k in from_file)


def test_a_checkpoint_that_lacks_weights_is_refused_naming_them(tmp_path):
    from safetensors.torch import load_file, save_file

    path = tmp_path / "consolidated.safetensors"
    voxtral.random_checkpoint(PARAMS, 5, 32, "xnnpack", path)
    weights = load_file(str(path))
    dropped = sorted(k for k in weights if k.startswith("layers.1."))
    save_file({k: v for k, v in weights.items() if k not in dropped}, str(path))
    with pytest.raises(ManifestError, match=r"lacks weights the model's params call for \('decoder\.layers\.1\.[^']+', "
                                            r"'decoder\.layers\.1\.[^']+', '[^']+' and \d+ more"):
        voxtral.make_model(PARAMS, path, 0, 32, "xnnpack")


def test_a_checkpoint_of_other_params_is_a_failure_of_the_definition(tmp_path):
    path = tmp_path / "consolidated.safetensors"
    voxtral.random_checkpoint(PARAMS, 5, 32, "xnnpack", path)
    wider = json.loads(PARAMS.read_text())
    wider["dim"] = 128
    other = tmp_path / "params.json"
    other.write_text(json.dumps(wider))
    with pytest.raises(RuntimeError, match="size mismatch"):
        voxtral.make_model(other, path, 0, 32, "xnnpack")


def test_the_audio_bound_is_set_for_the_export_and_put_back():
    from executorch.examples.models.voxtral_realtime import export_voxtral_rt

    original = export_voxtral_rt.Dim
    with voxtral._audio_bound(export_voxtral_rt, 50):
        assert export_voxtral_rt.Dim("_t_mel_base", min=1, max=3000).max == 50
        assert export_voxtral_rt.Dim("seq_len", min=1, max=64).max == 64
    assert export_voxtral_rt.Dim is original


def test_checkpoint_key_inverts_upstreams_mapping_for_each_part():
    from executorch.examples.models.voxtral_realtime.model import _MM_PREFIX, _map_checkpoint_key

    for name in ("encoder.conv_layers.0.conv.weight", "encoder.layers.0.attention.wq.weight", "encoder.norm.weight",
                 "adapter.w_in.weight", "adapter.w_out.weight", "decoder.tok_embeddings.weight",
                 "decoder.layers.0.feed_forward.w1.weight", "decoder.norm.weight"):
        key = voxtral.checkpoint_key(name, _MM_PREFIX)
        assert key is not None and _map_checkpoint_key(key) == name
    assert voxtral.checkpoint_key("something.else", _MM_PREFIX) is None


def test_a_clip_becomes_the_encoders_frames_and_one_too_long_is_refused(tmp_path):
    from ptebuild.errors import UsageError
    from ptebuild.models.multimodal.audio import Clip, mel_frames

    clip = Clip(tmp_path / "a.wav", 16000, [0.1 * math.sin(i / 5) for i in range(8000)])  # 0.5 s: 50 frames
    mel = mel_frames(clip, 128, 160, 8, 400)
    assert tuple(mel.shape) == (1, 128, 48) and mel.dtype == torch.float32
    with pytest.raises(UsageError, match=r"0\.5 s is longer than the program takes \(0\.4 s: its model's max_audio_seconds\)"):
        mel_frames(clip, 128, 160, 8, 40)
    with pytest.raises(UsageError, match="shorter than the encoder's least input"):
        mel_frames(Clip(clip.path, 16000, clip.samples[:500]), 128, 160, 8, 400)
