"""Weights as people save them: a checkpoint holding the state dict (``weights_key``), Lightning's
layout, a dotted path, safetensors; a checkpoint without a key named is told which to name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import ptebuild
from project_copy import copy_project

from ptebuild.errors import ManifestError
from ptebuild.models.factory.checkpoints import load_state_dict


def state() -> dict[str, torch.Tensor]:
    torch.manual_seed(3)
    return torch.nn.Linear(4, 2).state_dict()


def load(path: Path, key: str | None):
    return load_state_dict(path, key, manifest="m.toml", model="policy", weights=path.name)


def same(a, b) -> bool:
    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(("saved", "key"), [
    ({"model": "SD", "epoch": 3}, "model"),
    ({"state_dict": "SD", "epoch": 3, "global_step": 120, "pytorch-lightning_version": "2.5.0",
      "optimizer_states": [{"state": {}, "param_groups": [{"lr": 0.001}]}]}, "state_dict"),
    ({"state": {"model": "SD", "ema": "SD"}, "step": 7}, "state.model"),
    ({"model.ema": "SD", "model": {"other": torch.zeros(1)}}, "model.ema"),  # a key with a dot, taken whole first
], ids=["model", "lightning", "dotted", "dotted-key"])
def test_weights_key_picks_the_state_dict_inside_a_checkpoint(tmp_path, saved, key):
    def fill(value):
        if value == "SD":
            return state()
        return {k: fill(v) for k, v in value.items()} if isinstance(value, dict) else value

    torch.save(fill(saved), tmp_path / "ckpt.pt")
    assert same(load(tmp_path / "ckpt.pt", key), state())


def test_a_safetensors_file_is_read_directly(tmp_path):
    from safetensors.torch import save_file

    save_file(state(), tmp_path / "model.safetensors")
    assert same(load(tmp_path / "model.safetensors", None), state())
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "gone.safetensors", None)


def test_a_checkpoint_without_a_key_named_lists_its_entries_and_names_the_likeliest(tmp_path):
    torch.save({"model": state(), "epoch": 3, "optimizer": {"state": {}}}, tmp_path / "ckpt.pt")
    with pytest.raises(ManifestError) as raised:
        load(tmp_path / "ckpt.pt", None)
    assert raised.value.location == "models.policy.weights" and raised.value.exit_code == 2
    assert str(raised.value) == (
        "m.toml: models.policy.weights: 'ckpt.pt' is a dict of 3 entries, not a state dict (names -> tensors); "
        "it holds model (a state dict of 2 tensors), epoch (an int), optimizer (a dict of 1 entries); "
        "set weights_key = 'model'")
    torch.save({"state_dict": state(), "model": state()}, tmp_path / "lightning.pt")
    with pytest.raises(ManifestError, match=r"set weights_key = 'state_dict'$"):
        load(tmp_path / "lightning.pt", None)
    torch.save({"ema": {"model": state()}, "epoch": 1}, tmp_path / "nested.pt")
    with pytest.raises(ManifestError, match=r"set weights_key = 'ema.model'$"):
        load(tmp_path / "nested.pt", None)


def test_a_key_that_names_nothing_or_no_state_dict_is_located_at_weights_key(tmp_path):
    torch.save({"model": state(), "epoch": 3}, tmp_path / "ckpt.pt")
    with pytest.raises(ManifestError) as raised:
        load(tmp_path / "ckpt.pt", "modle")
    assert raised.value.location == "models.policy.weights_key"
    assert raised.value.message == ("'modle': 'ckpt.pt' has no entry 'modle' (did you mean 'model'?); it has "
                                    "model (a state dict of 2 tensors), epoch (an int): name one of them")
    with pytest.raises(ManifestError, match=r"'model.x': entry 'model' of 'ckpt.pt' has no entry 'x'; it has weight "):
        load(tmp_path / "ckpt.pt", "model.x")
    with pytest.raises(ManifestError, match=r"^m.toml: models.policy.weights_key: entry 'epoch' of 'ckpt.pt' is an int, "):
        load(tmp_path / "ckpt.pt", "epoch")


MODEL = """
[models.saved]
factory = "tinymodels.tiny:make_tiny"
weights = "ckpt.pt"
{key}
[models.saved.methods.forward]
inputs = [{{ name = "x", shape = [3, 6] }}]

[programs.saved]
model = "saved"
backend = "portable"
"""


def test_weights_key_is_in_the_programs_key_only_where_set(tmp_path):
    """The fast sibling of the build below: a model's weights_key is one of its programs' key inputs
    (another key rebuilds), and a model without one keeps the key it had."""
    from ptebuild.builder.keys import program_inputs
    from ptebuild.hashing import hash_file
    from ptebuild.manifest import load_manifest

    manifest = copy_project(tmp_path / "project")
    torch.save({"model": state()}, manifest.parent / "ckpt.pt")
    base = manifest.read_text()
    keyed = {}
    for key in ("", 'weights_key = "model"', 'weights_key = "ema"'):
        manifest.write_text(base + MODEL.format(key=key))
        [program] = [p for p in load_manifest(manifest).programs if p.name == "saved"]
        keyed[key] = program_inputs(program, load_manifest(manifest), hash_file)
    assert "manifest.model.weights_key" not in keyed[""]
    assert (keyed['weights_key = "model"']["manifest.model.weights_key"], keyed['weights_key = "ema"']["manifest.model.weights_key"]) == (
        '"model"', '"ema"')


@pytest.mark.slow
def test_a_build_from_a_checkpoint_runs_with_its_weights_and_keys_on_weights_key(tmp_path):
    """End to end: the program holds the checkpoint's weights; the key covers weights_key (a changed
    key rebuilds); without a key, the build stops with the located line, exit 2."""
    import tinymodels_for_weights  # noqa: F401  (puts the tiny models on sys.path)
    from tinymodels.tiny import make_tiny

    manifest = copy_project(tmp_path / "project")
    torch.manual_seed(42)
    trained = make_tiny(width=16).eval()
    torch.manual_seed(43)
    other = make_tiny(width=16).eval()
    torch.save({"model": trained.state_dict(), "ema": other.state_dict(), "epoch": 3}, manifest.parent / "ckpt.pt")
    base = manifest.read_text()
    cache = tmp_path / "cache"

    manifest.write_text(base + MODEL.format(key=""))
    refused = ptebuild("build", manifest, "--cache", cache, "--only", "saved", "--json")
    assert refused.returncode == 2, refused.stderr
    [target] = json.loads(refused.stdout)["targets"]
    assert target["message"].startswith(f"{manifest}: models.saved.weights: 'ckpt.pt' is a dict of 3 entries, not a state dict")
    assert "it holds model (a state dict of 7 tensors), ema (a state dict of 7 tensors), epoch (an int); set weights_key = 'model'" in target["message"]

    results = {}
    for key in ("model", "ema"):
        manifest.write_text(base + MODEL.format(key=f'weights_key = "{key}"'))
        done = ptebuild("build", manifest, "--cache", cache, "--only", "saved", "--json", "--explain")
        assert done.returncode == 0, done.stderr
        [target] = json.loads(done.stdout)["targets"]
        assert target["status"] == "built", target  # a changed key rebuilds
        results[key] = (manifest.parent / "out" / "saved.pte").read_bytes()
    assert any(line.startswith("manifest field models.saved.weights_key changed") for line in target["explain"]), target["explain"]
    from executorch.runtime import Runtime

    x = torch.randn(3, 6)
    for key, model in (("model", trained), ("ema", other)):
        (tmp_path / f"{key}.pte").write_bytes(results[key])
        method = Runtime.get().load_program(tmp_path / f"{key}.pte").load_method("forward")
        with torch.no_grad():
            assert torch.allclose(method.execute([x])[0], model(x), atol=1e-5)


# -- checkpoints as saved: a prefix on every name, a whole pickled module ----------------------------------

class Wrapped(torch.nn.Module):
    """As PyTorch Lightning holds a model (``self.model``) beside a loss with weights of its own."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.model = torch.nn.Linear(4, 2)
        self.loss = torch.nn.CrossEntropyLoss(weight=torch.ones(2))


def test_weights_prefix_strips_lightnings_model_prefix_and_leaves_its_other_names_out(tmp_path):
    torch.save({"state_dict": Wrapped().state_dict(), "epoch": 3}, tmp_path / "lightning.ckpt")
    loaded = load_state_dict(tmp_path / "lightning.ckpt", "state_dict", manifest="m.toml", model="policy",
                             weights="lightning.ckpt", weights_prefix="model.")
    assert same(loaded, state())  # loss.weight left out


def test_weights_prefix_strips_ddps_module_prefix_and_a_safetensors_ones(tmp_path):
    from safetensors.torch import save_file

    torch.save({f"module.{k}": v for k, v in state().items()}, tmp_path / "ddp.pt")
    save_file({f"backbone.{k}": v for k, v in state().items()}, tmp_path / "model.safetensors")
    for name, prefix in (("ddp.pt", "module."), ("model.safetensors", "backbone.")):
        loaded = load_state_dict(tmp_path / name, None, manifest="m.toml", model="policy", weights=name, weights_prefix=prefix)
        assert same(loaded, state()), name


def test_a_prefix_no_name_has_is_located_and_names_the_one_they_have(tmp_path):
    torch.save({f"module.{k}": v for k, v in state().items()}, tmp_path / "ddp.pt")
    with pytest.raises(ManifestError) as raised:
        load_state_dict(tmp_path / "ddp.pt", None, manifest="m.toml", model="policy", weights="ddp.pt", weights_prefix="model.")
    assert raised.value.location == "models.policy.weights_prefix" and raised.value.exit_code == 2
    assert raised.value.message == ("no name in 'ddp.pt' begins with 'model.' (its first is 'module.weight'); its names "
                                    "begin with 'module.': set weights_prefix = 'module.'")


def test_a_whole_pickled_module_is_refused_in_one_line(tmp_path):
    torch.save(torch.nn.Linear(4, 2), tmp_path / "whole.pt")
    with pytest.raises(ManifestError) as raised:
        load(tmp_path / "whole.pt", None)
    assert raised.value.location == "models.policy.weights"
    assert raised.value.message == (
        "'whole.pt' is a whole pickled Linear (torch.save(model)), which ptebuild does not unpickle: loading it would "
        "run code; save its weights instead: torch.save(model.state_dict(), path)")


def test_a_prefix_on_every_unexpected_key_is_noticed_and_the_fix_named(tmp_path):
    """Seen by a user with a Lightning checkpoint: 'missing key conv.0.weight (and 12 more), unexpected
    key model.conv.0.weight' with no way to strip the prefix and no hint that every key had it."""
    import tinymodels_for_weights  # noqa: F401  (puts the tiny models on sys.path)
    from tinymodels.tiny import make_tiny

    from ptebuild.manifest import load_manifest
    from ptebuild.models.factory.loading import build_model

    manifest = copy_project(tmp_path / "project")
    torch.save({"state_dict": {f"model.{k}": v for k, v in make_tiny(width=16).state_dict().items()}, "epoch": 1},
               manifest.parent / "ckpt.pt")
    base = manifest.read_text()
    manifest.write_text(base + MODEL.format(key='weights_key = "state_dict"'))
    program = next(p for p in load_manifest(manifest).programs if p.name == "saved")
    with pytest.raises(ManifestError) as raised:
        build_model(program, manifest.parent, str(manifest))
    assert raised.value.location == "models.saved.weights"
    assert raised.value.message.endswith(
        "; every name the model expects is in the file with the prefix 'model.' (and the same shape): "
        "set weights_prefix = 'model.'"), raised.value.message
    manifest.write_text(base + MODEL.format(key='weights_key = "state_dict"\nweights_prefix = "model."'))
    program = next(p for p in load_manifest(manifest).programs if p.name == "saved")
    assert program.weights_prefix == "model."
    assert isinstance(build_model(program, manifest.parent, str(manifest)), torch.nn.Module)


def test_weights_prefix_needs_weights_and_is_in_the_key_only_where_set(tmp_path):
    from ptebuild.builder.keys import program_inputs
    from ptebuild.hashing import hash_file
    from ptebuild.manifest import load_manifest

    manifest = copy_project(tmp_path / "project")
    torch.save({"model": state()}, manifest.parent / "ckpt.pt")
    base = manifest.read_text()
    manifest.write_text(base + MODEL.format(key='weights_prefix = "model."'))
    plan = load_manifest(manifest)
    inputs = program_inputs(next(p for p in plan.programs if p.name == "saved"), plan, hash_file)
    assert inputs["manifest.model.weights_prefix"] == '"model."'
    manifest.write_text(base + MODEL.format(key="").replace('weights = "ckpt.pt"', 'weights_prefix = "model."'))
    result = ptebuild("build", manifest)
    assert result.returncode == 2
    assert "models.saved: weights_prefix is stripped from the weights file's names: set weights too" in result.stderr


def test_a_prefix_is_named_only_where_it_gives_every_name_with_its_shape():
    from ptebuild.models.factory.checkpoints import prefix_hint

    own = {"weight": (2, 4), "bias": (2,)}
    lightning = {"model.weight": (2, 4), "model.bias": (2,), "loss.weight": (2,)}
    assert prefix_hint(own, lightning).endswith("set weights_prefix = 'model.'")
    assert prefix_hint(own, {"conv.weight": (4, 3, 3, 3), "conv.bias": (4,)}) == ""  # another model's weights
    assert prefix_hint(own, {"model.weight": (2, 4)}) == ""  # one name short
    assert prefix_hint(own, {"a.b.weight": (2, 4), "a.b.bias": (2,)}).endswith("set weights_prefix = 'a.b.'")
