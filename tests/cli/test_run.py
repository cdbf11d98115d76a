"""`ptebuild run` through ptebuild.cli.main on a real build of the tiny project, in executorch's runtime."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from project_copy import copy_project

from ptebuild import cli

METHODS = ["forward", "score"]


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Path:
    """The tiny project, built once for the module."""
    manifest = copy_project(tmp_path_factory.mktemp("run-project"))
    # A cache shared by the modules of the session: the second module's build is a restore.
    cache = tmp_path_factory.getbasetemp() / "ptebuild-cache"
    assert cli.main(["build", str(manifest), "--cache", str(cache)]) == 0
    return manifest


@pytest.fixture
def run(capsys):
    """Run ``ptebuild run``; returns (exit code, stdout, stderr)."""

    def call(*argv) -> tuple[int, str, str]:
        code = cli.main(["run", *map(str, argv)])
        stdout, stderr = capsys.readouterr()
        assert "Traceback" not in stderr
        return code, stdout, stderr

    return call


@pytest.mark.parametrize("program", ["tiny_portable", "tiny_xnnpack"])
def test_run_prints_figures_and_latencies_of_every_method(manifest, run, program):
    code, out, err = run(manifest, program, "--iters", "5")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    out_dir = manifest.parent / "out"
    assert lines[0] == f"{program} ({program.split('_')[1]}): {out_dir / program}.pte + {program}_weights.ptd"
    assert lines[1].split() == ["method", "max", "abs", "err", "cosine", "executorch", "eager", "ratio"]
    for line, method in zip(lines[2:4], METHODS):
        name, error, cosine, latency, ms, eager, ms2, ratio = line.split()
        assert name == method
        assert float(error) < 1e-4 and float(cosine) > 0.99999
        assert float(latency) > 0 and float(eager) > 0 and ms == ms2 == "ms"
        assert ratio.endswith("x")
    assert lines[4] == "median of 5 runs after 1 warm-up; ratio = eager / executorch"
    assert lines[5] == "inputs: the check's example inputs (seed 1; batch=2); compared with eager PyTorch"
    assert len(lines) == 6


def test_run_json_gives_the_numbers(manifest, run):
    code, out, _ = run(manifest, "tiny_xnnpack", "--json", "--iters", "3")
    assert code == 0
    document = json.loads(out)
    assert document["program"] == "tiny_xnnpack" and document["backend"] == "xnnpack"
    assert document["iters"] == 3 and document["within_tolerance"] is True
    assert document["inputs"] == "the check's example inputs (seed 1; batch=2)" and document["reference"] == "eager PyTorch"
    assert [m["method"] for m in document["methods"]] == METHODS
    for method in document["methods"]:
        assert 0 <= method["max_abs_error"] <= document["atol"]
        assert method["cosine"] >= document["min_cosine"]
        assert method["latency_ms"] > 0 and method["eager_latency_ms"] > 0
        [output] = method["outputs"]
        assert output["shape"] == [2, 3]  # the example batch size of the manifest


def test_run_one_method(manifest, run):
    code, out, _ = run(manifest, "tiny_portable", "--method", "score", "--iters", "1", "--json")
    assert code == 0
    assert [m["method"] for m in json.loads(out)["methods"]] == ["score"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["tiny_xnnpak"], "no program 'tiny_xnnpak' (did you mean 'tiny_xnnpack'?); name one of tiny_portable, tiny_xnnpack"),
        (["tiny_xnnpack", "--method", "scor"], "program 'tiny_xnnpack' has no method 'scor' (did you mean 'score'?)"),
        (["tiny_xnnpack", "--iters", "0"], "--iters 0: give at least 1"),
        (["tiny_xnnpack", "--iters", "many"], "argument --iters: invalid int value: 'many'"),
    ],
    ids=["program-typo", "method-typo", "zero-iters", "bad-iters"],
)
def test_bad_names_are_usage_errors(manifest, run, argv, message):
    code, out, err = run(manifest, *argv)
    assert (code, out) == (2, "")
    assert err.startswith("error: ") and message in err
    assert err.count("\n") == 1


def test_not_built_yet(tiny_project, run):
    code, out, err = run(tiny_project, "tiny_portable")
    assert (code, out) == (1, "")
    pte = tiny_project.parent / "out" / "tiny_portable.pte"
    assert err == (
        f"error: {pte}: program 'tiny_portable' is not built yet; run `ptebuild build {tiny_project}` first\n"
    )


def test_a_ptd_of_another_program_is_refused_before_running(manifest, run, tmp_path):
    out = Path(shutil.copytree(manifest.parent / "out", tmp_path / "out"))
    shutil.copyfile(out / "tiny_xnnpack_weights.ptd", out / "tiny_portable_weights.ptd")
    code, stdout, err = run(manifest, "tiny_portable", "--out", out)
    assert (code, stdout) == (1, "")
    assert err.startswith(f"error: {out / 'tiny_portable.pte'}: needs key 'model.")
    assert err.count("\n") == 1


@pytest.mark.parametrize(("manifest_name", "program", "extra"), [
    ("robot_cuda.toml", "policy_cuda", []),
    ("chat_cuda.toml", "chat_cuda", ["--prompt", "Once upon a time"]),
])
def test_a_program_this_runtime_cannot_run_is_refused_in_one_line(run_cli, manifest_name, program, extra):
    """On the GPU host, 'run' of a CUDA language model ended in an internal error (ExecuTorch's
    custom ops library, built for another torch): its Python runtime has no CUDA backend at all."""
    manifest = Path(__file__).resolve().parents[2] / "manifests" / manifest_name
    code, out, err = run_cli("run", manifest, program, *extra)
    assert (code, out) == (2, "")
    assert err == (f"error: {manifest}: programs.{program}: ExecuTorch's runtime here (its Python package) has no cuda "
                   "backend, so 'ptebuild run' cannot run this program (its build checked it: aoti-runner-cuda); run it "
                   "on its device with a runtime built for the backend (docs/device.md)\n")
