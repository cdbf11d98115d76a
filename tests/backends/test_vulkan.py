"""The Vulkan backend: upstream's bytes (reproducible, and unchanged by the faster lowering), one
``.ptd`` per data name, the structural check and what it catches, its report, inspect.

The programs are real (ExecuTorch's VulkanPartitioner): :mod:`mobile_programs` built once per
session through the command line, or lowered in this process where a test needs to.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from helpers import ptebuild
from mobile_programs import make_model

from ptebuild.cli.build import summary
from ptebuild.errors import CheckError, LoadError, PtebuildError


def _program(mobile_build, name: str = "duo_vulkan"):
    from ptebuild.manifest import load_manifest

    return next(p for p in load_manifest(mobile_build.manifest).programs if p.name == name)


def _lower(program, staging: Path):
    from ptebuild.lowering.examples import make_inputs
    from ptebuild.models.factory.lower import lower

    model = make_model()
    inputs = {m.name: make_inputs(m, program.seed) for m in program.methods}
    return model, lower(model, program, inputs, staging, lambda _: None)


@pytest.mark.slow
def test_two_cold_builds_give_equal_bytes(mobile_build, mobile_rebuild):
    assert mobile_build.digests("duo_vulkan") == mobile_rebuild.digests("duo_vulkan")
    assert sorted(mobile_build.digests("duo_vulkan")) == ["duo_vulkan.pte", "duo_vulkan_weights.ptd"]


@pytest.mark.slow
def test_same_bytes_as_upstreams_export(mobile_build, tmp_path):
    """ptebuild's lowering context (pattern graphs made once) changes no byte of upstream's export."""
    from executorch.backends.vulkan import VulkanPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from ptebuild.lowering.examples import make_inputs
    from ptebuild.models.factory.lower import export_method

    whole = _program(mobile_build)
    program = dataclasses.replace(whole, data_name=None, methods=tuple(m for m in whole.methods if m.name == "encode"))
    model, lowered = _lower(program, tmp_path)
    exported = {m.name: export_method(model, program, m, make_inputs(m, program.seed), lambda _: None) for m in program.methods}
    upstream = to_edge_transform_and_lower(exported, partitioner=[VulkanPartitioner()],
                                           compile_config=EdgeCompileConfig(_check_ir_validity=False)).to_executorch()
    assert lowered.files[program.pte_name].read_bytes() == upstream.buffer
    assert sorted(lowered.files) == [program.pte_name]


def test_pattern_graphs_are_made_once_and_the_originals_restored():
    from executorch.backends.vulkan import patterns

    from ptebuild.backends import vulkan

    entry = next(e for e in patterns.fusable_patterns.values() if e.get_graphs_fn is not None)
    original = entry.get_graphs_fn
    calls = []

    def counting():
        calls.append(1)
        return original()

    entry.get_graphs_fn = counting
    try:
        with vulkan._cached_pattern_graphs():
            first, second = entry.get_graphs_fn(), entry.get_graphs_fn()
        assert entry.get_graphs_fn is counting and len(calls) == 1
        assert [id(g) for g in first] == [id(g) for g in second]
    finally:
        entry.get_graphs_fn = original
        vulkan._pattern_graphs.pop(counting, None)


def test_weights_go_to_one_ptd_keyed_by_sha256(mobile_build):
    from ptebuild.runtime import read_ptd, read_pte

    pte = read_pte(mobile_build.out / "duo_vulkan.pte")
    ptd = read_ptd(mobile_build.out / "duo_vulkan_weights.ptd")
    assert pte.opaque_delegates == ()
    assert pte.required_keys and pte.required_keys == ptd.keys
    assert all(len(key) == 64 for key in ptd.keys)


def test_check_kind_is_structural_in_the_report_and_the_summary(mobile_build):
    program = mobile_build.program("duo_vulkan")
    assert program["check"] == "vulkan-structural"
    assert all(f["structural"] and "max_abs_error" not in f for f in program["figures"])
    decode = next(f for f in program["figures"] if f["method"] == "decode")
    assert decode == {
        "method": "decode", "structural": True, "delegate": "VulkanBackend", "delegates": 1, "delegate_calls": 1,
        "kernel_calls": 0, "inputs": ["float32[4, 16]"], "outputs": ["float32[4, 4]"], "payload": "Vulkan graph, 9 operator calls",
    }
    row = next(line for line in summary(mobile_build.report).splitlines() if line.startswith("duo_vulkan "))
    assert "vulkan-structural" in row and "err " not in row


def test_schema_describes_the_compile_specs(capsys):
    from ptebuild.cli import main

    assert main(["schema"]) == 0
    properties = json.loads(capsys.readouterr().out)["$defs"]["VulkanOptions"]["properties"]
    assert {"force_fp16", "storage_type", "texture_limits"} <= set(properties)
    assert all(p.get("description") for p in properties.values())


def _copy(mobile_build, tmp_path: Path) -> tuple[Path, Path]:
    pte = shutil.copy(mobile_build.out / "duo_vulkan.pte", tmp_path / "duo_vulkan.pte")
    ptd = shutil.copy(mobile_build.out / "duo_vulkan_weights.ptd", tmp_path / "duo_vulkan_weights.ptd")
    return Path(pte), Path(ptd)


def test_structural_check_passes_on_the_built_program(mobile_build):
    from ptebuild.backends.vulkan import check as vulkan

    figures = vulkan.check_program(make_model(), _program(mobile_build), mobile_build.out / "duo_vulkan.pte",
                                   mobile_build.out / "duo_vulkan_weights.ptd")
    assert [f.method for f in figures] == ["decode", "encode"]


def test_structural_check_needs_the_ptd_and_its_exact_bytes(mobile_build, tmp_path):
    from ptebuild.backends.vulkan import check as vulkan

    pte, ptd = _copy(mobile_build, tmp_path)
    program = _program(mobile_build)
    with pytest.raises(LoadError, match=r"duo_vulkan\.pte: needs key '[0-9a-f]{64}' and \d+ more, not found in the \.ptd files searched: no \.ptd given"):
        vulkan.check_program(None, program, pte, None)
    data = bytearray(ptd.read_bytes())
    data[-1] ^= 0xFF  # the last byte of the last blob
    ptd.write_bytes(bytes(data))
    with pytest.raises(LoadError, match=r"hashes to sha256:[0-9a-f]{64}: the file is corrupt"):
        vulkan.check_program(None, program, pte, ptd)


def test_structural_check_catches_a_payload_that_does_not_parse(mobile_build, tmp_path):
    from ptebuild.backends.vulkan import check as vulkan

    pte, ptd = _copy(mobile_build, tmp_path)
    data = pte.read_bytes()
    at = data.index(b"VK00")
    pte.write_bytes(data[:at] + b"VK99" + data[at + 4:])
    with pytest.raises(CheckError, match=r"^programs\.duo_vulkan: the program does not parse: .*duo_vulkan\.pte: method 'decode' "
                                         r"delegate 0 \(VulkanBackend\): Vulkan flatbuffer identifier b'VK99' at offset 36, expected b'VK00'"):
        vulkan.check_program(make_model(), _program(mobile_build), pte, ptd)


def test_structural_check_catches_a_method_vulkan_did_not_take(mobile_build, tmp_path):
    """``cumsum`` is not among the Vulkan delegate's operators: nothing of the method is delegated."""
    import torch

    from ptebuild.backends.vulkan import check as vulkan
    from ptebuild.lowering.examples import make_inputs
    from ptebuild.models.factory.lower import lower

    class Cumulative(torch.nn.Module):
        def encode(self, x):
            return torch.cumsum(x, dim=1)

        def decode(self, h):
            return torch.cumsum(h, dim=1)

    program = dataclasses.replace(_program(mobile_build), data_name=None)
    model = Cumulative()
    inputs = {m.name: make_inputs(m, program.seed) for m in program.methods}
    lowered = lower(model, program, inputs, tmp_path, lambda _: None)
    with pytest.raises(CheckError) as info:
        vulkan.check_program(model, program, lowered.files[program.pte_name], None)
    assert str(info.value) == (
        "programs.duo_vulkan: method 'decode' has no Vulkan delegate: the partitioner took none of its operators "
        "(1 run on ExecuTorch's portable kernels): build it for the portable backend, or change the model to operators "
        "this backend takes"
    )


def test_inspect_shows_the_graph_and_the_share_of_each_method_without_torch(mobile_build):
    pte = mobile_build.out / "duo_vulkan.pte"
    done = ptebuild("inspect", pte, "--full", trace_imports=True)
    assert done.returncode == 0, done.stderr
    imported = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert not imported & {"torch", "executorch"}
    assert "  delegated: 1 of 1 calls (VulkanBackend); 0 operator calls outside" in done.stdout
    assert ("    Vulkan graph: 9 operator calls (aten.view_copy.default 4, aten.bmm.default 1, aten.linear.default 1, "
            "aten.permute_copy.default 1, aten.tanh.default 1, sym_size.int 1); inputs float32[4, 16]; outputs float32[4, 4]; "
            "2 constants (2 in named data, 0 bytes inline)") in done.stdout
    document = json.loads(ptebuild("inspect", pte, "--json").stdout)
    encode = next(m for m in document["methods"] if m["name"] == "encode")
    contents = encode["delegates"][0]["contents"]
    assert contents["operators"] == {"aten.linear.default": 2, "aten.relu.default": 1}
    assert len(encode["delegates"][0]["keys"]) == 4 == len(contents["named_keys"])


def test_bad_compile_spec_is_one_located_line():
    from ptebuild.manifest import load_manifest

    manifests = Path(__file__).resolve().parents[1] / "manifests"
    with pytest.raises(PtebuildError) as info:
        load_manifest(manifests / "bad-vulkan-storage.toml")
    assert str(info.value).endswith(
        "programs.tiny_vulkan.compile_specs.storage_type: unknown value 'image'; expected one of 'buffer', 'texture_3d', 'texture_2d'"
    )


def test_a_model_that_updates_a_buffer_is_refused_with_the_known_limit(tmp_path):
    """A Vulkan delegate of a stateful model does not bind to its call (its graph has the state's
    update as an output the call does not pass): refused by the structural check, named as the
    partitioner's known limit with what to do, not as ptebuild's bug."""
    project = tmp_path / "stateful"
    shutil.copytree(Path(__file__).resolve().parent / "edgemodels", project / "edgemodels",
                    ignore=shutil.ignore_patterns("__pycache__"))
    manifest = project / "stateful.toml"
    manifest.write_text('[defaults]\nout = "out"\n\n[models.counter]\nfactory = "edgemodels.stateful:make_counter"\n\n'
                        '[models.counter.methods.forward]\ninputs = [{ name = "x", shape = [2, 8] }]\n\n'
                        '[programs.counter_vulkan]\nmodel = "counter"\nbackend = "vulkan"\ndata_name = "counter_vulkan_weights"\n')
    done = ptebuild("build", manifest, "--cache", tmp_path / "cache")
    assert done.returncode == 1, done.stderr
    assert "the model updates buffers in place (calls); known limit of ExecuTorch 1.5.1's Vulkan partitioner" in done.stderr
    assert "a bug in ptebuild" not in done.stderr
    assert not (project / "out" / "counter_vulkan.pte").exists()
