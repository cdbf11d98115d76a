"""Resolving a validated manifest into a plan (:mod:`ptebuild.manifest.resolve`), called directly.

Each program's values come from its table, its model, its backend and ``[defaults]``, in that
order; its ``program_entry`` (what its key hashes) changes with what changes the program and not
with what is judged after it (a budget) or how the manifest is spelled; each program is bound to
its backend once; two outputs that are one file are refused; bundles resolve their members and
ETRecords; offline (a release bundle's copy) no file is looked for. The one-line messages of
broken manifests are :mod:`test_load`'s (``tests/manifests/bad-*.toml``); those here are the
checks no bad manifest there reaches.
"""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from ptebuild.backends import bound_backend, get_backend
from ptebuild.errors import DataNameError, ManifestError
from ptebuild.manifest.resolve import check_collisions, resolve
from ptebuild.manifest.schema import Manifest
from ptebuild.plan import BuildPlan, Limit, ShimPlan

MODEL = """
[models.m]
factory = "mymodel:make"
dims = { batch = { min = 1, max = 4 } }
methods.score.inputs = [{ name = "x", shape = ["batch", 6] }]
methods.forward.inputs = [{ name = "x", shape = ["batch", 6] }]
"""

XNNPACK = MODEL + """
[defaults]
backend = "xnnpack"
options.xnnpack = { quantize = "int8" }
check = { rtol = 0.01 }
budget = { max_pte = "2 MiB", min_delegated = 0.5 }

[programs.p]
model = "m"
methods = ["score", "forward"]
compile_specs = { per_op_mode = true }
check = { atol = 0.5 }
budget = { max_pte = 1000 }
"""


def resolved(folder: Path, text: str, *, offline: bool = False) -> BuildPlan:
    """``text`` as a manifest in ``folder`` (beside its factory module ``mymodel.py``), validated and resolved."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "m.toml").write_text(text)
    (folder / "mymodel.py").write_text("def make():\n    raise NotImplementedError\n")
    manifest = Manifest.model_validate(tomllib.loads(text))
    return resolve(manifest, display="m.toml", manifest_dir=folder, offline=offline)


def refusal(folder: Path, text: str, error: type[Exception] = ManifestError) -> str:
    with pytest.raises(error) as caught:
        resolved(folder, text)
    return str(caught.value)


def test_a_programs_values_come_from_its_table_its_backend_and_the_defaults(tmp_path):
    plan = resolved(tmp_path, XNNPACK)
    (program,) = plan.programs
    assert program.backend == "xnnpack"  # from [defaults]
    assert [m.name for m in program.methods] == ["forward", "score"]  # a set: sorted
    assert program.options["quantize"] == "int8" and program.options["per_op_mode"] is True  # options and compile_specs, one model
    assert (program.atol, program.rtol, program.check_set) == (0.5, 0.01, ("atol", "rtol"))
    backend_default = get_backend("xnnpack").check_defaults(program.bound.options)
    assert program.min_cosine == backend_default.min_cosine  # the part the manifest leaves to the backend
    assert program.calibrated is True  # XNNPACK's int8 is calibrated
    assert program.budget is not None and program.budget.limits == (
        Limit("max_pte", 1000.0, "programs.p.budget"), Limit("min_delegated", 0.5, "defaults.budget"))
    assert (program.kind, program.factory, program.check_enabled) == ("factory", "mymodel:make", True)
    assert plan.manifest == "m.toml" and plan.manifest_dir == str(tmp_path) and plan.out_dir() == tmp_path / "out"


def test_a_program_option_overrides_the_defaults_one(tmp_path):
    plan = resolved(tmp_path, XNNPACK.replace("compile_specs = { per_op_mode = true }", 'options = { quantize = "none" }'))
    assert plan.programs[0].options["quantize"] == "none"
    assert plan.programs[0].calibrated is False


def test_the_program_entry_changes_with_the_program_only(tmp_path):
    """What the key hashes: a budget (judged after the build), the order methods are listed in and
    a bundle that asks nothing of the program leave it alone; an option changes it."""
    entry = resolved(tmp_path / "a", XNNPACK).programs[0].program_entry
    assert entry["methods"] == ["forward", "score"] and entry["backend"] == "xnnpack"
    assert not {"compile_specs", "budget", "bundle_io", "etrecord"} & set(entry)
    assert "min_token_agreement" not in entry["check"]
    same = XNNPACK.replace('methods = ["score", "forward"]', 'methods = ["forward", "score"]').replace("max_pte = 1000", "max_pte = 5")
    same += '\n[bundles.edge]\nprograms = ["p"]\n'
    assert resolved(tmp_path / "b", same).programs[0].program_entry == entry
    other = resolved(tmp_path / "c", XNNPACK.replace("per_op_mode = true", "per_op_mode = false")).programs[0].program_entry
    assert other != entry and other["options"]["per_op_mode"] is False


def test_each_program_is_bound_to_its_backend_once(tmp_path):
    (program,) = resolved(tmp_path, XNNPACK).programs
    assert bound_backend(program) is program.bound
    assert program.bound.source is program.options
    assert type(program.bound.options).__name__ == "XnnpackOptions" and program.bound.options.quantize == "int8"


@pytest.mark.parametrize(("where", "enabled"), [("defaults", False), ("program", False), ("neither", True)])
def test_a_check_turned_off_in_the_defaults_or_the_program_is_off(tmp_path, where, enabled):
    text = XNNPACK
    if where == "defaults":
        text = text.replace("check = { rtol = 0.01 }", "check = { rtol = 0.01, enabled = false }")
    elif where == "program":
        text = text.replace("check = { atol = 0.5 }", "check = { atol = 0.5, enabled = false }")
    assert resolved(tmp_path, text).programs[0].check_enabled is enabled


def test_a_models_entry_names_weights_key_only_where_it_is_set(tmp_path):
    (tmp_path / "w.pt").write_bytes(b"")
    plain = resolved(tmp_path, MODEL + '[programs.p]\nmodel = "m"\nbackend = "portable"\n').programs[0]
    assert not {"weights_key", "weights_prefix"} & set(plain.model_entry)
    keyed = MODEL.replace('factory = "mymodel:make"', 'factory = "mymodel:make"\nweights = "w.pt"\nweights_key = "state.model"')
    program = resolved(tmp_path, keyed + '[programs.p]\nmodel = "m"\nbackend = "portable"\n').programs[0]
    assert program.model_entry["weights_key"] == "state.model" and "weights_prefix" not in program.model_entry
    assert (program.weights, program.weights_key, program.weights_prefix) == ("w.pt", "state.model", None)


def test_a_method_listed_twice_is_refused(tmp_path):
    text = MODEL + '[programs.p]\nmodel = "m"\nbackend = "portable"\nmethods = ["forward", "score", "forward"]\n'
    assert refusal(tmp_path, text) == "m.toml: programs.p.methods: lists a method twice; list each once"


@pytest.mark.parametrize(("pattern", "problem"), [
    ("../shared/*.py", "leaves the manifest's folder ('..')"),
    ("/abs/layers/*.py", "leaves the manifest's folder (an absolute path)"),
    (" ", "is empty"),
])
def test_a_models_sources_are_globs_inside_its_folder(tmp_path, pattern, problem):
    text = MODEL.replace('factory = "mymodel:make"', f'factory = "mymodel:make"\nsources = ["layers/*.py", "{pattern}"]')
    text += '[programs.p]\nmodel = "m"\nbackend = "portable"\n'
    assert refusal(tmp_path, text) == f"m.toml: models.m.sources[1]: {pattern!r} {problem}; give globs of files relative to the manifest"


OFFLINE = MODEL.replace("mymodel:make", "gone.module:make") + """
[programs.p]
model = "m"
backend = "portable"

[shims.aoti_cuda_shims]
source = "shims/aoti_cuda_shims.def"
"""


def test_offline_no_file_the_manifest_names_is_looked_for(tmp_path):
    """A release bundle's copy of the manifest resolves away from its project."""
    plan = resolved(tmp_path, OFFLINE, offline=True)
    assert [p.factory for p in plan.programs] == ["gone.module:make"]
    assert plan.shims == (ShimPlan("aoti_cuda_shims", "shims/aoti_cuda_shims.def", "gnu", keep_order=False),)
    assert refusal(tmp_path, OFFLINE).startswith("m.toml: models.m.factory: cannot import 'gone.module' (used by program 'p')")
    (tmp_path / "gone").mkdir()
    (tmp_path / "gone" / "module.py").write_text("def make(): ...\n")
    assert refusal(tmp_path, OFFLINE) == ("m.toml: shims.aoti_cuda_shims.source: no such file 'shims/aoti_cuda_shims.def'; "
                                          "give a .def or shim-list file")
    (tmp_path / "shims").mkdir()
    (tmp_path / "shims" / "aoti_cuda_shims.def").write_text("LIBRARY aoti_cuda_shims.dll\nEXPORTS\n  f\n")
    assert resolved(tmp_path, OFFLINE.replace('source = "shims', 'format = "coff"\nkeep_order = true\nsource = "shims')).shims == (
        ShimPlan("aoti_cuda_shims", "shims/aoti_cuda_shims.def", "coff", keep_order=True),)


SHARED = MODEL + """
[programs.a]
model = "m"
backend = "portable"
data_name = "weights"

[programs.b]
model = "m"
backend = "xnnpack"
data_name = "weights"
"""


def test_programs_may_share_a_data_name(tmp_path):
    plan = resolved(tmp_path, SHARED)
    assert plan.shared_data() == {"weights": ("a", "b")}


def test_no_output_may_be_the_build_record(tmp_path):
    plan = resolved(tmp_path, SHARED)
    clash = replace(plan, programs=(replace(plan.programs[0], extra_outputs=("ptebuild.json",)), plan.programs[1]))
    with pytest.raises(DataNameError) as caught:
        check_collisions("m.toml", clash)
    assert str(caught.value) == "m.toml: ptebuild's build record and program 'a' both write 'ptebuild.json'; give one of them another name"


def test_a_program_and_a_shim_library_may_not_write_one_file(tmp_path):
    plan = resolved(tmp_path, SHARED)
    shim = ShimPlan("aoti_cuda_shims", "aoti.def", "gnu", keep_order=False)
    same = replace(plan, programs=(replace(plan.programs[0], extra_outputs=("aoti_cuda_shims.lib",)),), shims=(shim,))
    with pytest.raises(DataNameError, match=r"^m\.toml: program 'a' and shim library 'aoti_cuda_shims' both write 'aoti_cuda_shims\.lib'; "):
        check_collisions("m.toml", same)
    in_case = replace(same, programs=(replace(plan.programs[0], extra_outputs=("AOTI_cuda_shims.lib",)),))
    with pytest.raises(DataNameError) as caught:
        check_collisions("m.toml", in_case)
    assert str(caught.value) == ("m.toml: program 'a' and shim library 'aoti_cuda_shims' write 'AOTI_cuda_shims.lib' and "
                                 "'aoti_cuda_shims.lib', one file on macOS and Windows; choose names that differ in more than case")
    check_collisions("m.toml", replace(same, programs=plan.programs))  # apart, they are fine


BUNDLES = SHARED.replace('data_name = "weights"\n', "", 1) + """
[programs.c]
model = "m"
backend = "portable"
etrecord = true

[bundles.edge]
programs = ["?"]
etrecord = true
bundle_io = true
output = "Edge-1.0.tgz"

[bundles.mobile]
programs = ["c", "b"]
include = ["NOTICE", "docs/*.md"]
"""


def test_bundles_resolve_their_members_archives_and_etrecords(tmp_path):
    plan = resolved(tmp_path, BUNDLES)
    edge, mobile = plan.bundles
    assert (edge.name, edge.programs, edge.archive, edge.include) == ("edge", ("a", "b", "c"), "Edge-1.0.tgz", ())
    assert edge.etrecords == ("a.etrecord", "b.etrecord", "c.etrecord")
    # Another bundle's etrecord = true makes b write one, but brings it into this bundle only where b asks itself.
    assert (mobile.programs, mobile.archive, mobile.include, mobile.etrecords) == (("b", "c"), "mobile.tar.gz", ("NOTICE", "docs/*.md"),
                                                                                  ("c.etrecord",))
    programs = {p.name: p for p in plan.programs}
    assert all(p.bundle_io and p.etrecord and p.program_entry["bundle_io"] is True for p in programs.values())
    assert programs["a"].output_names == ("a.pte", "a.bpte", "a.etrecord")


def test_a_bundle_without_bundle_io_leaves_its_programs_keys_alone(tmp_path):
    plain = resolved(tmp_path / "plain", SHARED)
    bundled = resolved(tmp_path / "bundled", SHARED + '\n[bundles.all]\nprograms = ["*"]\n')
    assert [p.program_entry for p in bundled.programs] == [p.program_entry for p in plain.programs]
    assert bundled.bundles[0].programs == ("a", "b") and bundled.bundles[0].etrecords == ()
