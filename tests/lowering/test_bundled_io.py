"""Programs that carry their test cases (``bundle_io``): every .bpte of two clean builds verified by
ExecuTorch's own Python API, reproducible, and holding eager PyTorch's outputs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from release_build import built_bundles

from ptebuild.runtime.bpte_file import read_bpte
from ptebuild.runtime.record import read_build_record

VERIFY = Path(__file__).resolve().parent / "bpte_verify.py"


@pytest.fixture(scope="session")
def builds(tmp_path_factory) -> list[Path]:
    """The output folders of two builds of the bundle project from clean caches."""
    return [built_bundles(tmp_path_factory, which).parent / "out" for which in ("a", "b")]


def verify(bpte: Path, ptd: Path | None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(VERIFY), str(bpte), *([str(ptd)] if ptd else []), "--rtol", "1e-5", "--atol", "1e-6"],
        capture_output=True, text=True, timeout=300,
    )


@pytest.mark.slow
def test_every_bpte_verifies_with_executorchs_api(builds):
    checked = []
    for out in builds:
        for name, files in read_build_record(out).programs.items():
            if files.bpte is None:
                continue
            ptd = out / files.data[0] if files.data else None
            done = verify(out / files.bpte, ptd)
            assert done.returncode == 0, f"{out / files.bpte}:\n{done.stdout}{done.stderr[-3000:]}"
            cases = [line for line in done.stdout.splitlines() if ": ok (" in line]
            assert len(cases) == 6, done.stdout  # two methods, three sizes each
            checked.append((name, "BundledModule" if ptd is None else "with a .ptd"))
    assert sorted(set(checked)) == [("tiny_inside", "BundledModule"), ("tiny_xnnpack", "with a .ptd")]


def test_a_wrong_expected_output_fails_executorchs_verification(builds, tmp_path):
    source = builds[0] / "tiny_inside.bpte"
    data = bytearray(source.read_bytes())
    expected = read_bpte(source).suite("forward").cases[0].expected_outputs[0].tensor.data
    at = bytes(data).find(expected)
    assert at > 0 and bytes(data).count(expected) == 1
    data[at + 3] ^= 0x40  # the first float's exponent: another value, far outside any tolerance
    broken = tmp_path / "tiny_inside.bpte"
    broken.write_bytes(bytes(data))
    done = verify(broken, None)
    assert done.returncode == 1 and "forward[0]: FAILED" in done.stdout, done.stdout + done.stderr[-2000:]


def test_bpte_bytes_are_reproducible_and_bundle_the_pte_unchanged(builds):
    first, second = builds
    for name in ("tiny_inside", "tiny_xnnpack"):
        assert (first / f"{name}.bpte").read_bytes() == (second / f"{name}.bpte").read_bytes()
        assert read_bpte(first / f"{name}.bpte").read_program() == (first / f"{name}.pte").read_bytes()


def test_the_expected_outputs_are_eager_pytorchs(builds, tmp_path):
    """Recomputed here, in this process, from the manifest: the same bytes as the build bundled."""
    from ptebuild.lowering.bundled_io import bundled_cases
    from ptebuild.manifest import load_manifest
    from ptebuild.models.factory.loading import build_model

    project = Path(shutil.copytree(builds[0].parent, tmp_path / "project", ignore=shutil.ignore_patterns("out")))
    plan = load_manifest(project / "tiny.toml")
    program = next(p for p in plan.programs if p.name == "tiny_inside")
    cases = bundled_cases(build_model(program, project, plan.manifest), program)
    bundled = read_bpte(builds[0] / "tiny_inside.bpte")
    for method, pairs in cases.items():
        suite = bundled.suite(method)
        assert len(suite.cases) == len(pairs)
        for case, (inputs, outputs) in zip(suite.cases, pairs):
            assert [v.tensor.data for v in case.inputs] == [t.contiguous().numpy().tobytes() for t in inputs]
            assert [v.tensor.data for v in case.expected_outputs] == [t.numpy().tobytes() for t in outputs]


def test_the_samples_are_test_cases_after_the_generated_inputs():
    import torch

    from ptebuild.lowering.bundled_io import bundled_cases
    from ptebuild.plan import DimPlan, InputPlan, MethodPlan, ProgramPlan

    method = MethodPlan("forward", "forward", (InputPlan("x", ("batch", 4), "float32"),), (DimPlan("batch", 1, 8, 2),))
    program = ProgramPlan(name="p", model="m", backend="portable", factory="m:f", kwargs={}, weights=None, seed=0,
                          sources=(), methods=(method,), data_name=None, options={}, atol=1e-4, min_cosine=0.9999,
                          check_enabled=True, model_entry={}, program_entry={})
    model = torch.nn.Linear(4, 2).eval()
    samples = [(torch.full((3, 4), 100.0),), (torch.full((5, 4), -7.0),)]
    cases = bundled_cases(model, program, {"forward": samples})["forward"]
    assert [tuple(inputs[0].shape) for inputs, _ in cases] == [(2, 4), (1, 4), (8, 4), (3, 4), (5, 4)]
    assert torch.equal(cases[3][1][0], model(samples[0][0]).detach())
