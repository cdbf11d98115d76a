"""The build plan (:mod:`ptebuild.plan`): frozen records a build works from, and their JSON.

A plan written to JSON and read back is the same plan (the no-op path reads a cached one); its
JSON is canonical (what keys hash); a program names its output files in one order; inputs flatten
to leaves in torch.export's order; selecting programs brings along those that share a ``.ptd``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ptebuild.plan import (
    Budget,
    BuildPlan,
    BundlePlan,
    DimPlan,
    InputPlan,
    Limit,
    MethodPlan,
    ProgramPlan,
    ShimPlan,
)
from ptebuild.tolerances import CheckSettings, Tolerance

X = InputPlan("x", ("batch", 6), "float32")
TOKENS = InputPlan("tokens", ("batch",), "int64", low=0, high=10)
STATE = InputPlan("state", (), "", kind="tuple", items=(
    InputPlan("h", ("batch", 4), "float32"),
    InputPlan("obs", (), "", kind="dict", items=(InputPlan("depth", (2, "batch"), "float16"), InputPlan("scale", (), "", kind="scalar", value=0.5))),
))
BATCH = DimPlan("batch", 1, 8, 2)
FORWARD = MethodPlan("forward", "forward", (X, STATE, TOKENS), (BATCH,), samples="samples/forward")
SCORE = MethodPlan("score", "score_fn", (X,), (DimPlan("batch", 2, 16, 4, multiple_of=2),))


def program(name: str = "policy_xnnpack", **changes) -> ProgramPlan:
    full = ProgramPlan(
        name=name, model="policy", backend="xnnpack", factory="policy:make", kwargs={"width": 16, "layers": [1, 2]},
        weights="weights/policy.pt", seed=3, sources=("layers/*.py",), methods=(FORWARD, SCORE), data_name="policy_weights",
        options={"quantize": "int8"}, atol=1e-3, min_cosine=0.999, check_enabled=True,
        model_entry={"factory": "policy:make", "seed": 3}, program_entry={"backend": "xnnpack", "methods": ["forward", "score"]},
        bundle_io=True, weights_key="state.model", weights_prefix="model.", etrecord=True,
        budget=Budget((Limit("max_pte", 2_097_152.0, "programs.policy_xnnpack.budget"), Limit("min_delegated", 0.95, "defaults.budget"))),
        rtol=1e-4, calibrated=True, check_set=("atol",), kind="factory", model_files=(("params", "params.json"), ("tokenizer", "tok.json")),
        extra_outputs=("policy_xnnpack.tokenizer.json",), min_token_agreement=0.9,
    )
    return replace(full, **changes)


def plain(name: str, data_name: str | None = None) -> ProgramPlan:
    """A program with only what a plan needs (no bundle, no budget)."""
    return ProgramPlan(name=name, model="m", backend="portable", factory="m:make", kwargs={}, weights=None, seed=0, sources=(),
                       methods=(SCORE,), data_name=data_name, options={}, atol=1e-4, min_cosine=0.99999, check_enabled=True,
                       model_entry={}, program_entry={})


def test_an_inputs_leaves_are_its_tensors_and_scalars_in_order():
    assert X.leaves() == [X]
    assert [leaf.name for leaf in STATE.leaves()] == ["h", "depth", "scale"]
    assert [leaf.name for leaf in FORWARD.leaves()] == ["x", "h", "depth", "scale", "tokens"]


def test_an_example_shape_puts_each_dims_example_size_in_its_place():
    assert FORWARD.example_shape(X) == (2, 6)
    assert FORWARD.example_shape(STATE.items[1].items[0]) == (2, 2)
    assert SCORE.example_shape(X) == (4, 6)
    assert FORWARD.example_shape(InputPlan("fixed", (3, 0), "bool")) == (3, 0)


def test_an_input_reads_back_from_its_json_nested_and_with_tuples():
    from dataclasses import asdict

    again = InputPlan.from_json(json.loads(json.dumps(asdict(STATE))))
    assert again == STATE
    assert isinstance(again.items, tuple) and isinstance(again.items[1].items[0].shape, tuple)
    assert InputPlan.from_json({"name": "s", "dtype": "", "kind": "scalar", "value": 3}) == InputPlan("s", (), "", kind="scalar", value=3)


def test_a_budget_finds_its_limits_by_name():
    budget = program().budget
    assert budget is not None
    found = budget.limit("max_pte")
    assert found is not None and found.value == 2_097_152.0 and found.location == "programs.policy_xnnpack.budget.max_pte"
    assert budget.limit("min_delegated").location == "defaults.budget.min_delegated"
    assert budget.limit("max_ptd") is None


def test_a_programs_output_names_in_order():
    assert program().output_names == ("policy_xnnpack.pte", "policy_weights.ptd", "policy_xnnpack.bpte",
                                      "policy_xnnpack.etrecord", "policy_xnnpack.tokenizer.json")
    alone = program(data_name=None, bundle_io=False, etrecord=False, extra_outputs=())
    assert alone.output_names == ("policy_xnnpack.pte",)
    assert (alone.ptd_name, alone.bpte_name, alone.etrecord_name) == (None, None, None)


def test_a_programs_model_files_by_field():
    assert program().model_file("tokenizer") == "tok.json"
    assert program().model_file("checkpoint") is None


def test_check_settings_hold_the_manifests_parts_for_every_output():
    """``check_set`` names what the manifest set (atol here): it holds for every dtype; the rest
    follow each output's dtype from the backend's float32 default."""
    settings = program().check_settings()
    assert settings == CheckSettings(Tolerance(1e-3, 1e-4, 0.999), atol=1e-3)
    assert settings.for_dtype("int64").atol == 1e-3
    unset = program(check_set=()).check_settings()
    assert unset.atol is None and unset.for_dtype("int64").atol != 1e-3


def test_a_program_round_trips_through_json():
    original = program()
    document = json.loads(json.dumps(original.to_json()))
    assert "bound" not in document
    assert document["budget"] == {"limits": [{"name": "max_pte", "value": 2_097_152.0, "where": "programs.policy_xnnpack.budget"},
                                             {"name": "min_delegated", "value": 0.95, "where": "defaults.budget"}]}
    again = ProgramPlan.from_json(document)
    assert again == original
    assert again.methods[0].samples == "samples/forward" and again.methods[1].dims[0].multiple_of == 2
    assert again.model_files == (("params", "params.json"), ("tokenizer", "tok.json"))
    assert ProgramPlan.from_json(json.loads(json.dumps(program(budget=None, check_set=()).to_json()))).budget is None


def test_a_programs_binding_is_neither_json_nor_compared():
    bound = program(bound=object())
    assert bound == program()
    assert bound.to_json() == program().to_json()
    assert ProgramPlan.from_json(bound.to_json()).bound is None


def test_a_program_written_before_newer_fields_reads_with_their_defaults():
    document = program().to_json()
    for newer in ("check_set", "model_files", "extra_outputs"):
        del document[newer]
    for method in document["methods"]:
        del method["samples"]
    again = ProgramPlan.from_json(document)
    assert (again.check_set, again.model_files, again.extra_outputs) == ((), (), ())
    assert [m.samples for m in again.methods] == [None, None]


def build_plan(tmp_path: Path, **changes) -> BuildPlan:
    full = BuildPlan(
        manifest="robot.toml", manifest_dir=str(tmp_path / "project"), out="../out",
        programs=(program(), plain("policy_portable", "policy_weights"), plain("tiny")),
        shims=(ShimPlan("aoti_cuda_shims", "shims/aoti.def", "def", keep_order=False),),
        bundles=(BundlePlan("edge", ("policy_portable", "policy_xnnpack"), "edge.tar.gz", ("NOTICE",), ("policy_xnnpack.etrecord",)),),
        dist="release/dist",
    )
    return replace(full, **changes)


def test_a_plan_round_trips_through_json_and_takes_the_manifests_place_from_the_reader(tmp_path):
    plan = build_plan(tmp_path)
    text = plan.to_json()
    assert BuildPlan.from_json(text, manifest=plan.manifest, manifest_dir=plan.manifest_dir) == plan
    moved = BuildPlan.from_json(text, manifest="elsewhere/robot.toml", manifest_dir="/elsewhere")
    assert (moved.manifest, moved.manifest_dir) == ("elsewhere/robot.toml", "/elsewhere")
    assert moved.programs == plan.programs and moved.bundles == plan.bundles


def test_a_plans_json_is_canonical(tmp_path):
    """Sorted keys, no spaces: two plans equal in value give the same text (keys hash it)."""
    plan = build_plan(tmp_path)
    text = plan.to_json()
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    shuffled = program(kwargs={"layers": [1, 2], "width": 16}, options={"quantize": "int8"})
    assert build_plan(tmp_path, programs=(shuffled, *plan.programs[1:])).to_json() == text


def test_a_plan_written_before_bundles_reads_with_none(tmp_path):
    document = json.loads(build_plan(tmp_path).to_json())
    del document["bundles"], document["dist"]
    again = BuildPlan.from_json(json.dumps(document), manifest="robot.toml", manifest_dir=str(tmp_path))
    assert (again.bundles, again.dist) == ((), "dist")


def test_out_and_dist_folders_are_relative_to_the_manifest_unless_absolute(tmp_path):
    plan = build_plan(tmp_path)
    assert plan.out_dir() == tmp_path / "out"
    assert plan.dist_dir() == tmp_path / "project" / "release" / "dist"
    elsewhere = build_plan(tmp_path, out=str(tmp_path / "abs"), dist=str(tmp_path / "d"))
    assert (elsewhere.out_dir(), elsewhere.dist_dir()) == (tmp_path / "abs", tmp_path / "d")


def test_bundles_and_shims_by_name(tmp_path):
    plan = build_plan(tmp_path)
    assert plan.bundle("edge") is plan.bundles[0]
    assert plan.bundle("mobile") is None
    assert plan.shims[0].output_names == ("aoti_cuda_shims.lib",)


def test_shared_data_names_the_programs_that_write_one_ptd(tmp_path):
    assert build_plan(tmp_path).shared_data() == {"policy_weights": ("policy_xnnpack", "policy_portable")}
    assert build_plan(tmp_path, programs=(program(), plain("tiny", "tiny_weights"))).shared_data() == {}


@pytest.mark.parametrize(("names", "programs", "shims"), [
    (["tiny"], ["tiny"], []),
    (["policy_portable"], ["policy_xnnpack", "policy_portable"], []),
    (["aoti_cuda_shims"], [], ["aoti_cuda_shims"]),
    (["tiny", "aoti_cuda_shims"], ["tiny"], ["aoti_cuda_shims"]),
    ([], [], []),
], ids=["one", "brings-its-ptd-sharer", "a-shim", "program-and-shim", "none"])
def test_select_keeps_the_named_targets_and_their_ptd_sharers(tmp_path, names, programs, shims):
    plan = build_plan(tmp_path)
    chosen = plan.select(names)
    assert [p.name for p in chosen.programs] == programs
    assert [s.name for s in chosen.shims] == shims
    assert (chosen.manifest, chosen.manifest_dir, chosen.out_dir()) == (plan.manifest, plan.manifest_dir, plan.out_dir())
