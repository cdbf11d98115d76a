"""Weights keyed by sha256 (:mod:`ptebuild.lowering.weightkeys`): what the keys hold, and that
ExecuTorch's own runtime then refuses mix-ups."""

from __future__ import annotations

import hashlib
import re

import pytest
import torch
from runtime_programs import EXAMPLE, export_portable, two_linear

from ptebuild.runtime.keys import sha256_in_key
from ptebuild.runtime.ptd_file import read_ptd
from ptebuild.runtime.pte_file import read_pte

PARAMETERS = {"first.weight", "first.bias", "second.weight", "second.bias"}
X = torch.linspace(-1, 1, 4).reshape(1, 4)


def run_with_executorch(pte, ptd, method="forward"):
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(pte, data_path=ptd)
    return program.load_method(method).execute([X])[0]


def test_portable_keys_are_fqn_at_sha256_of_the_stored_bytes(programs):
    ptd = read_ptd(programs.a.ptd)
    assert {key.split("@")[0] for key in ptd.keys} == PARAMETERS
    for key in ptd.keys:
        assert re.fullmatch(r"[a-z.]+@sha256:[0-9a-f]{64}", key)
        assert hashlib.sha256(ptd.read_blob(key)).hexdigest() == sha256_in_key(key)
    assert read_pte(programs.a.pte).required_keys == ptd.keys
    assert set(programs.a.renamed) == ptd.keys
    assert set(programs.a.renamed.values()) == PARAMETERS


def test_pte_bytes_change_with_weight_values_only_when_keyed(programs):
    assert programs.a_raw.pte.read_bytes() == programs.b_raw.pte.read_bytes()  # the bug
    assert programs.a.pte.read_bytes() != programs.b.pte.read_bytes()


def test_matching_pair_runs_like_eager(programs):
    out = run_with_executorch(programs.a.pte, programs.a.ptd)
    torch.testing.assert_close(out, programs.a.model(X))


def test_without_sha256_keys_the_other_programs_weights_load_silently(programs):
    """The bug this module fixes: a.pte runs with b's weights and gives b's answer."""
    out = run_with_executorch(programs.a_raw.pte, programs.b_raw.ptd)
    torch.testing.assert_close(out, programs.b.model(X))
    assert not torch.allclose(out, programs.a.model(X))


@pytest.mark.parametrize(
    "pte, ptd",
    [("a", "b"), ("xa", "xb")],
    ids=["portable", "xnnpack"],
)
def test_executorch_refuses_another_programs_ptd_naming_the_key(programs, capfd, pte, ptd):
    pte, ptd = getattr(programs, pte), getattr(programs, ptd)
    with pytest.raises(RuntimeError, match="Failed to load method forward"):
        run_with_executorch(pte.pte, ptd.ptd)
    log = "".join(capfd.readouterr())
    needed = read_pte(pte.pte).required_keys
    assert any(key in log for key in needed), log


def test_executorch_refuses_a_portable_pte_without_its_ptd(programs, capfd):
    with pytest.raises(RuntimeError, match="Failed to load method forward"):
        run_with_executorch(programs.a.pte, None)
    assert "external_data_map is null" in "".join(capfd.readouterr())


def test_weights_shared_by_two_methods_are_stored_once(programs):
    ptd = read_ptd(programs.multi.ptd)
    keys_by_fqn = {key.split("@")[0]: key for key in ptd.keys}
    assert set(keys_by_fqn) == {"net.left.weight", "net.left.bias", "net.right.weight", "net.right.bias"}
    # left and right hold equal values: four keys (each with its own layout), two blobs.
    assert sha256_in_key(keys_by_fqn["net.left.weight"]) == sha256_in_key(keys_by_fqn["net.right.weight"])
    assert len({entry.segment_index for entry in ptd.entries.values()}) == 2
    pte = read_pte(programs.multi.pte)
    assert pte.method_names == ("doubled", "forward")
    assert pte.required_keys == ptd.keys
    model = programs.multi.model
    torch.testing.assert_close(run_with_executorch(programs.multi.pte, programs.multi.ptd), model(X))
    torch.testing.assert_close(
        run_with_executorch(programs.multi.pte, programs.multi.ptd, "doubled"), model(X) * 2
    )


def test_xnnpack_keeps_its_bare_sha256_keys_and_needs_no_renaming(programs):
    pte = read_pte(programs.xa.pte)
    ptd = read_ptd(programs.xa.ptd)
    assert programs.xa.renamed == {}
    assert not pte.external_tensor_keys
    assert pte.required_keys == pte.delegate_keys == ptd.keys
    for key in ptd.keys:
        assert re.fullmatch(r"[0-9a-f]{64}", key)
        assert hashlib.sha256(ptd.read_blob(key)).hexdigest() == key
    torch.testing.assert_close(
        run_with_executorch(programs.xa.pte, programs.xa.ptd), programs.xa.model(X), atol=1e-5, rtol=1e-5
    )


def test_keying_twice_changes_nothing(tmp_path):
    from executorch.exir import ExecutorchBackendConfig, to_edge

    from ptebuild.lowering.weightkeys import key_constants_by_sha256

    config = ExecutorchBackendConfig(external_constants=lambda node: "w")
    et = to_edge(torch.export.export(two_linear(5), EXAMPLE)).to_executorch(config)
    first = key_constants_by_sha256(et, config)
    buffer = et.buffer
    assert key_constants_by_sha256(et, config) == first
    assert et.buffer == buffer


def test_portable_export_without_external_weights_is_left_alone(tmp_path):
    from executorch.exir import ExecutorchBackendConfig, to_edge

    from ptebuild.lowering.weightkeys import key_constants_by_sha256

    config = ExecutorchBackendConfig()
    et = to_edge(torch.export.export(two_linear(5), EXAMPLE)).to_executorch(config)
    buffer = et.buffer
    assert key_constants_by_sha256(et, config) == {}
    assert et.buffer == buffer and not et._tensor_data


def test_data_name_names_the_ptd(tmp_path):
    built = export_portable(tmp_path, "p", {"forward": two_linear(6)}, "my_data", keyed=True)
    assert [p.name for p in built.ptds] == ["my_data.ptd"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my_data.ptd", "p.pte"]
