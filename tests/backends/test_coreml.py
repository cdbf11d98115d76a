"""The Core ML backend: reproducible bytes, the structural check, its report, inspect, bad specs.

The programs are real: ExecuTorch's CoreMLPartitioner with coremltools, through the command
line (:mod:`mobile_programs`, built once per session) or :func:`ptebuild.models.factory.lower.lower`
in this process where a test breaks something on purpose.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from helpers import ptebuild
from mobile_programs import make_model

from ptebuild.cli import main
from ptebuild.cli.build import summary
from ptebuild.errors import CheckError

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"
BAD_SPECS = sorted(MANIFESTS.glob("bad-coreml-*.toml"))


def _program(mobile_build, name: str):
    from ptebuild.manifest import load_manifest

    return next(p for p in load_manifest(mobile_build.manifest).programs if p.name == name)


def _lower(mobile_build, program, staging: Path):
    """Lower ``program`` in this process, as a worker does; returns (eager model, lowered files)."""
    from ptebuild.lowering.examples import make_inputs
    from ptebuild.models.factory.lower import lower

    model = make_model()
    inputs = {m.name: make_inputs(m, program.seed) for m in program.methods}
    return model, lower(model, program, inputs, staging, lambda _: None)


@pytest.mark.slow
def test_two_cold_builds_in_different_folders_and_processes_give_equal_bytes(mobile_build, mobile_rebuild):
    first, second = mobile_build.digests("duo_coreml"), mobile_rebuild.digests("duo_coreml")
    assert first == second and list(first) == ["duo_coreml.pte"]
    assert mobile_build.out != mobile_rebuild.out


@pytest.mark.slow
def test_upstream_export_differs_between_two_exports(mobile_build):
    """Without ptebuild's normalisation, two exports of one model in one process already differ
    (the identifier is uuid4, the manifest's keys random): the reproducibility test above can fail."""
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from ptebuild.backends import get_backend
    from ptebuild.lowering.examples import make_inputs
    from ptebuild.models.factory.lower import export_method

    whole = _program(mobile_build, "duo_coreml")
    program = dataclasses.replace(whole, methods=whole.methods[:1])
    backend = get_backend("coreml")
    options = backend.options_model.model_validate(program.options)
    model = make_model()
    method = program.methods[0]

    def upstream() -> bytes:
        exported = export_method(model, program, method, make_inputs(method, program.seed), lambda _: None)
        edge = to_edge_transform_and_lower({method.name: exported}, partitioner=backend.partitioners(options, program),
                                           compile_config=EdgeCompileConfig(_check_ir_validity=False))
        return edge.to_executorch().buffer

    assert upstream() != upstream()


def test_identifier_is_derived_from_the_models_files(mobile_build, tmp_path):
    """The device caches the compiled model under its identifier: it names the content."""
    from ptebuild.backends.coreml.determinism import content_identifier
    from ptebuild.runtime.payload_readers import coreml as coreml_payload
    from ptebuild.runtime.pte_file import open_pte

    identifiers = []
    with open_pte(mobile_build.out / "duo_coreml.pte") as pte:
        for plan in pte.execution_plans():
            payload = pte.delegate_payload(plan.delegates()[0], plan.name())
            folder = tmp_path / plan.name()
            for relative, (offset, size) in coreml_payload.list_files(payload).items():
                (folder / relative).parent.mkdir(parents=True, exist_ok=True)
                (folder / relative).write_bytes(payload.read(offset, size, relative))
            identifier = coreml_payload.read_model(payload).identifier
            assert identifier == content_identifier(folder)
            identifiers.append(identifier)
    assert len(set(identifiers)) == 2


# Slow: a second Core ML export (10 s); the structural checks below stay in the default run.
@pytest.mark.slow
def test_a_multifunction_program_is_reproducible_and_checked(mobile_build, tmp_path):
    """iOS18: both methods in one multifunction model, named data of the .pte under a key that
    follows the content identifier (upstream: ``coreml_executorch_<uuid4>``)."""
    from ptebuild.backends import get_backend
    from ptebuild.runtime import read_pte
    from ptebuild.runtime.payload_readers import coreml as coreml_payload
    from ptebuild.runtime.pte_file import open_pte

    backend = get_backend("coreml")
    options = backend.options_model.model_validate({"minimum_deployment_target": "iOS18"}).model_dump(mode="json")
    assert options["multimethod_weight_sharing"] == "positional"
    program = dataclasses.replace(_program(mobile_build, "duo_coreml"), options=options)
    built = [_lower(mobile_build, program, tmp_path / str(i)) for i in range(2)]
    first, second = (lowered.files[program.pte_name] for _, lowered in built)
    assert first.read_bytes() == second.read_bytes()
    (key,) = read_pte(first).named_data_keys
    with open_pte(first) as pte:
        model = coreml_payload.read_model(pte.named_blob(key))
    assert key == "coreml_" + model.identifier and [f.name for f in model.functions] == ["decode", "encode"]
    figures = backend.check(built[0][0], program, first, None)[0]
    assert [f.payload for f in figures] == ["Core ML specification 9 (iOS18+), 13 MIL operations",
                                            "Core ML specification 9 (iOS18+), 9 MIL operations"]


def test_check_kind_is_structural_in_the_report_and_the_summary(mobile_build):
    program = mobile_build.program("duo_coreml")
    assert program["check"] == "coreml-structural"
    assert {f["method"] for f in program["figures"]} == {"encode", "decode"}
    assert all(f["structural"] and "max_abs_error" not in f for f in program["figures"])
    encode = next(f for f in program["figures"] if f["method"] == "encode")
    assert encode["delegate"] == "CoreMLBackend" and encode["kernel_calls"] == 0
    assert encode["inputs"] == ["args_0: float32[1..4, 8]"]
    row = next(line for line in summary(mobile_build.report).splitlines() if line.startswith("duo_coreml "))
    assert "coreml-structural" in row and "err " not in row


def test_structural_check_catches_a_model_that_lost_an_output(mobile_build, tmp_path, monkeypatch):
    from ptebuild.backends import get_backend
    from ptebuild.backends.coreml import determinism

    normalise = determinism.normalise_package

    def lose_an_output(package: Path) -> None:
        from coremltools.proto import Model_pb2

        normalise(package)
        path = package / "Data" / "com.apple.CoreML" / "model.mlmodel"
        spec = Model_pb2.Model()
        spec.ParseFromString(path.read_bytes())
        del spec.description.output[-1]
        path.write_bytes(spec.SerializeToString(deterministic=True))

    monkeypatch.setattr(determinism, "normalise_package", lose_an_output)
    program = _program(mobile_build, "duo_coreml")
    model, lowered = _lower(mobile_build, program, tmp_path)
    with pytest.raises(CheckError) as info:
        get_backend("coreml").check(model, program, lowered.files[program.pte_name], None)
    assert str(info.value).startswith("programs.duo_coreml: method 'decode' delegate 0: metadata.json binds inputs ['args_0'] "
                                      "and outputs ['aten_tanh_default'], the model has inputs ['args_0'] and outputs []")


def test_structural_check_catches_a_batch_range_core_ml_would_refuse(mobile_build, tmp_path, monkeypatch):
    """Without keeping torch.export's ranges, ExecuTorch's passes narrow batch 1..4 to 2..4 and
    the Core ML model would refuse a batch of 1 on the device: the check says so."""
    import contextlib

    from ptebuild.backends import get_backend
    from ptebuild.backends.coreml import ranges

    monkeypatch.setattr(ranges, "keep_declared_ranges", lambda _program: None)
    monkeypatch.setattr(ranges, "sizes_stay_oblivious", contextlib.nullcontext)

    program = _program(mobile_build, "duo_coreml")
    model, lowered = _lower(mobile_build, program, tmp_path)
    with pytest.raises(CheckError, match=r"method 'decode' delegate 0 input 'args_0': Core ML takes \[2\.\.4, 16\], "
                                         r"which refuses size 1\.\.4 of axis 0"):
        get_backend("coreml").check(model, program, lowered.files[program.pte_name], None)


def test_inspect_shows_the_delegate_its_share_and_the_models_io_without_torch(mobile_build):
    pte = mobile_build.out / "duo_coreml.pte"
    done = ptebuild("inspect", pte, "--full", trace_imports=True)
    assert done.returncode == 0, done.stderr
    imported = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert not imported & {"torch", "executorch", "coremltools"}
    text = done.stdout
    assert "  delegated: 1 of 1 calls (CoreMLBackend); 0 operator calls outside" in text
    # float16 arithmetic (the default): the model casts its float32 input and returns float16.
    assert ("    Core ML model, specification 7 (iOS 16+); 13 MIL operations (const 7, reshape 2, cast 1, linear 1, matmul 1, "
            "tanh 1); inputs args_0: float32[1..4, 16]; outputs aten_tanh_default: float16[?]") in text
    document = json.loads(ptebuild("inspect", pte, "--json").stdout)
    encode = next(m for m in document["methods"] if m["name"] == "encode")
    contents = encode["delegates"][0]["contents"]
    assert contents["specification_version"] == 7
    assert contents["inputs"] == [{"name": "args_0", "kind": "multiArray", "dtype": "float32", "shape": [1, 8], "ranges": [[1, 4], [8, 8]]}]
    assert contents["identifier"].startswith("executorch_") and contents["operations"]["linear"] == 2


def test_pure_reader_agrees_with_coremltools(mobile_build, tmp_path):
    """The inspect reader (pure Python) and coremltools read the same inputs and outputs."""
    from ptebuild.backends.coreml.check import _function_features, _ReadBack
    from ptebuild.runtime.payload_readers import coreml as coreml_payload
    from ptebuild.runtime.pte_file import open_pte

    with open_pte(mobile_build.out / "duo_coreml.pte") as pte:
        for plan in pte.execution_plans():
            delegate = plan.delegates()[0]
            pure, spec, function = _ReadBack(pte, tmp_path).model(delegate, plan.name())
            ours = coreml_payload.read_model(pte.delegate_payload(delegate, plan.name())).function(function)
            assert ours is not None
            assert (ours.inputs, ours.outputs) == _function_features(spec, function)
            assert pure.specification_version == spec.specificationVersion


@pytest.mark.parametrize("path", BAD_SPECS, ids=[p.stem for p in BAD_SPECS])
def test_bad_compile_specs_are_one_located_line(path, capsys, monkeypatch):
    monkeypatch.chdir(MANIFESTS)
    assert main(["build", path.name, "--no-cache"]) == 2
    err = capsys.readouterr().err
    expected = path.read_text().splitlines()[0].removeprefix("# expect: ").format(file=path.name)
    assert err == f"error: {expected}\n"


def test_compiled_model_is_refused_off_macos_with_the_reason():
    from ptebuild.backends import get_backend

    reason = get_backend("coreml").can_build({"model_type": "compiled_model"})
    assert reason is not None and reason.startswith("model_type 'compiled_model' needs macOS")
    assert get_backend("coreml").can_build({"model_type": "model"}) is None


def test_key_facts_name_coremltools():
    from importlib import metadata

    from ptebuild.backends import get_backend

    assert get_backend("coreml").toolchain_facts({}) == {"coreml.coremltools": metadata.version("coremltools")}


def test_schema_describes_the_compile_specs(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    properties = schema["$defs"]["CoreMLOptions"]["properties"]
    assert set(properties) >= {"compute_units", "minimum_deployment_target", "compute_precision", "model_type"}
    assert properties["minimum_deployment_target"]["description"].startswith("The oldest OS the model loads on")
    assert all(p.get("description") for p in properties.values())


def test_a_bool_mask_model_without_weights_passes_the_structural_check(tmp_path):
    """A Core ML package with no weights keeps an empty weights folder, which its Manifest.json
    names: the check recreates it (it was 'Item does not exist for identifier'). Its bool input is
    a float32 input of the Core ML model, which ExecuTorch's delegate converts a bool tensor into
    (it was refused as a mismatch)."""
    (tmp_path / "weightless.py").write_text(
        "import torch\n\n\nclass Masked(torch.nn.Module):\n    def forward(self, x, mask):\n"
        "        return x * mask.float()\n\n\ndef make():\n    return Masked()\n"
    )
    manifest = tmp_path / "weightless.toml"
    manifest.write_text(
        '[defaults]\nout = "out"\n\n[models.masked]\nfactory = "weightless:make"\n\n[models.masked.methods.forward]\n'
        'inputs = [{ name = "x", shape = [2, 3] }, { name = "mask", shape = [2, 3], dtype = "bool" }]\n\n'
        '[programs.masked_coreml]\nmodel = "masked"\nbackend = "coreml"\n'
    )
    done = ptebuild("build", manifest, "--cache", tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    assert "coreml-structural" in done.stdout
