"""A corpus nobody on the team wrote: ExecuTorch's own example models (``executorch.examples.models``,
installed with executorch, no download), built through manifests, checked in ExecuTorch's runtime,
for portable and XNNPACK, float and int8.

The default run builds a fast subset; the whole corpus is ``slow`` (``.ci/run`` runs it). Every
program either builds and passes its check against eager PyTorch, or fails with one line that
names its cause and its log. Models that need torchvision, torchaudio, torchsr, transformers or
downloaded weights are not in the corpus (they do not construct here).
"""

from __future__ import annotations

import json

import pytest
from corpus import MODELS, VARIANTS, write_project
from helpers import ptebuild, require_module

ALWAYS_BUILD = {"mul", "add", "add_mul", "linear", "softmax"}
"""Seen building and checking in every variant on this machine."""


def _build(tmp_path, programs: list[tuple[str, str]]) -> tuple[int, dict, str]:
    require_module("executorch.examples.models", "ExecuTorch's example models ship in its wheel")
    manifest = write_project(tmp_path / "corpus", programs)
    done = ptebuild("build", manifest, "--cache", tmp_path / "cache", "--keep-going", "--json", timeout=3600)
    try:
        return done.returncode, json.loads(done.stdout), done.stderr
    except ValueError:
        raise AssertionError(f"no JSON (exit {done.returncode}):\n{done.stdout}\n{done.stderr}") from None


def _checked(program: dict) -> None:
    assert program["status"] == "built", program.get("message")
    assert program["check"] == "executorch-runtime" and program["figures"]
    assert all(f["cosine"] > 0.9 for f in program["figures"])


def test_a_fast_subset_builds_and_is_checked(tmp_path):
    code, document, stderr = _build(tmp_path, [("mul", "portable"), ("linear", "xnnpack"), ("add_mul", "xnnpack_int8")])
    assert code == 0, stderr
    for program in document["targets"]:
        _checked(program)
    int8 = next(p for p in document["targets"] if p["name"] == "add_mul_xnnpack_int8")
    assert int8["backend"] == "xnnpack"


@pytest.mark.slow
def test_the_whole_corpus(tmp_path):
    programs = [(model, variant) for model in MODELS for variant in VARIANTS]
    code, document, _stderr = _build(tmp_path, programs)
    outcomes = {}
    for program in document["targets"]:
        model = program["name"].rsplit("_", 2)[0] if program["name"].endswith("_int8") else program["name"].rsplit("_", 1)[0]
        if program["status"] == "built":
            _checked(program)
            outcomes[program["name"]] = "built"
            continue
        assert model not in ALWAYS_BUILD, program.get("message")
        assert program["status"] == "failed", program
        error = program["message"]
        # One line, its cause named, the whole text in the program's log.
        assert "\n" not in error and "Traceback" not in error and "Exception raised from" not in error
        assert "(full output: " in error and error.rstrip(")").endswith(".log")
        outcomes[program["name"]] = error.split(": ", 2)[-1]
    print(json.dumps(outcomes, indent=1))  # which build and which do not, and why (-s shows it)
    assert code == (0 if all(v == "built" for v in outcomes.values()) else 1)


CNNS = [(model, variant) for model in ("mobilenet_v1_025", "resnet8", "ds_cnn") for variant in ("xnnpack", "xnnpack_int8")]


@pytest.mark.slow
def test_the_delegation_of_cnns_is_get_delegation_infos(tmp_path, monkeypatch):
    """ExecuTorch's own CNNs on XNNPACK, float and static int8, and an LSTM: each program's recorded
    delegation is what ``get_delegation_info`` counts on the same program, node for node."""
    from delegation_check import compare, lowered_again

    from ptebuild.insight.delegation import Delegation

    programs = [*CNNS, ("lstm", "xnnpack")]
    _code, document, stderr = _build(tmp_path, programs)
    record = json.loads((tmp_path / "corpus" / "out" / "ptebuild.json").read_text())["targets"]
    compared = {}
    for program in document["targets"]:
        if program["status"] != "built":
            continue
        recorded = Delegation.from_json(record[program["name"]]["insight"]["delegation"])
        infos, _ = lowered_again(tmp_path / "corpus" / "corpus.toml", program["name"], monkeypatch, tmp_path / "again")
        compared[program["name"]] = compare(recorded, infos)
    print(json.dumps(compared, indent=1))
    assert {f"{m}_{v}" for m, v in CNNS} <= set(compared), stderr
