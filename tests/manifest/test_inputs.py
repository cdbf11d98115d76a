"""Method inputs as people write models: nested tuples and lists, dicts, scalars; checked leaf by leaf."""

from __future__ import annotations

from pathlib import Path

from ptebuild.manifest import load_manifest
from ptebuild.plan import BuildPlan

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"


def test_nested_inputs_resolve_into_the_plan(monkeypatch):
    monkeypatch.chdir(MANIFESTS)
    plan = load_manifest("people.toml")
    (method,) = next(p for p in plan.programs if p.name == "rec_portable").methods
    x, state, obs, gain = method.inputs
    assert (x.kind, state.kind, obs.kind, gain.kind) == ("tensor", "tuple", "dict", "scalar")
    assert [i.name for i in state.items] == ["h", "c"] and state.items[0].shape == ("batch", 8)
    assert gain.value == 0.5
    assert [leaf.name for leaf in method.leaves()] == ["x", "h", "c", "bias", "extra", "gain"]
    assert [d.name for d in method.dims] == ["batch"]
    again = BuildPlan.from_json(plan.to_json(), manifest=plan.manifest, manifest_dir=plan.manifest_dir)
    assert again == plan


def test_a_tensor_input_keys_as_it_always_did(monkeypatch):
    """Existing manifests keep their model entries (and so their keys) byte for byte."""
    monkeypatch.chdir(MANIFESTS)
    plan = load_manifest("tiny.toml")
    entry = plan.programs[0].model_entry["methods"]["forward"]["inputs"][0]
    assert entry == {"name": "x", "shape": ["batch", 6], "dtype": "float32", "low": None, "high": None}


def test_example_inputs_follow_the_declared_structure(monkeypatch):
    import torch

    from ptebuild.lowering.examples import flat_inputs, make_inputs

    monkeypatch.chdir(MANIFESTS)
    (method,) = next(p for p in load_manifest("people.toml").programs if p.name == "rec_portable").methods
    x, (h, c), obs, gain = make_inputs(method, seed=3, sizes={"batch": 4})
    assert x.shape == (4, 6) and h.shape == c.shape == (4, 8)
    assert list(obs) == ["bias", "extra"] and obs["extra"].shape == (4, 5) and gain == 0.5
    flat = flat_inputs(make_inputs(method, seed=3, sizes={"batch": 4}))
    assert [tuple(t.shape) if isinstance(t, torch.Tensor) else t for t in flat] == [
        (4, 6), (4, 8), (4, 8), (4, 6), (4, 5), 0.5
    ]
    assert torch.equal(flat[0], x)


def test_nested_programs_are_checked_leaf_by_leaf(people_build):
    _, _, document, _ = people_build
    for name in ("rec_portable", "rec_xnnpack"):
        program = next(p for p in document["targets"] if p["name"] == name)
        assert program["status"] == "built", program.get("message")
        # {"action", "state": (h, c)} and [sum]: four output slots, at batch 2, 1 and 4.
        seen = {(f["output"], f["sizes"]["batch"]) for f in program["figures"]}
        assert seen == {(o, b) for o in range(4) for b in (1, 2, 4)}
        assert all(f["max_abs_error"] < 1e-4 for f in program["figures"])
