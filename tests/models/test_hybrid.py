"""Hybrid decoders of ExecuTorch's own definitions (``tests/models/hybrid.toml``): LFM2's short
convolutions and Qwen3.5's gated DeltaNet keep a state that is not a KV cache indexed by position.

A program's greedy continuation that ExecuTorch's TextLLMRunner must print is computed on a program
as the runner loads it, its state as a fresh load has it: on the method the check had already run,
LFM2's convolution state leaked into the new prompt, and a right 8da4w program was refused ("its
metadata methods or its tokenizer do not fit the runner") when a greedy step's two best logits were
0.005 apart. The fast sibling: :func:`ptebuild.models.executorch_llm.generation.carries_state`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import ptebuild

from ptebuild.models.executorch_llm.generation import carries_state

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def test_state_that_a_new_prompt_does_not_overwrite_is_told_from_a_kv_cache():
    kv = ("layers.1.attention.kv_cache.k_cache", "layers.1.attention.kv_cache.v_cache",
          "layers.0.attention.kv_cache.k_cache_scales", "layers.0.attention.kv_cache.v_cache_zero_points")
    assert not carries_state(kv)
    assert not carries_state(())
    assert carries_state((*kv, "layers.0.conv.conv_state"))  # LFM2
    assert carries_state(("layers.0.attention.recurrent_state",))  # Qwen3.5's gated DeltaNet


@pytest.mark.slow
def test_hybrid_programs_build_pass_the_runner_check_and_run(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(HERE / "hybrid", project / "hybrid")
    shutil.copy(HERE / "hybrid.toml", project / "hybrid.toml")
    shutil.copy(ROOT / "manifests" / "chat" / "tokenizer.json", project / "hybrid" / "tokenizer.json")
    manifest = project / "hybrid.toml"
    done = ptebuild("build", manifest, "--cache", tmp_path / "cache", "--json", "--keep-going")
    assert done.returncode == 0, done.stderr[-3000:]
    for program in json.loads(done.stdout)["targets"]:
        assert program["status"] == "built", program
        decode = program["figures"][-1]
        assert decode["runner_tokens"] >= 1 and decode["tokens_agreed"] >= decode["min_token_agreement"] * decode["tokens"]
    run = ptebuild("run", manifest, "lfm2_8da4w", "--prompt", "Once upon a time", "--max-new-tokens", "8")
    assert run.returncode == 0, run.stderr[-3000:]
