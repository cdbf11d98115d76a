"""On the GPU machine: manifests/chat_cuda.toml, the tiny chat decoder in bfloat16, lowered by
ExecuTorch's CUDA backend from ExecuTorch's LLM export of the model and checked on the GPU: the
backend's check at its example inputs, then by generation (prefill and greedy decode through the
program's KV cache, its compiled code run by AOTInductor's runner) against the eager model.
Run there: ``bash tests/cuda/run_on_gpu.sh llm``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import ptebuild

import ptebuild as api

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.gpu


def test_chat_cuda_builds_and_matches_eager_on_the_gpu(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "manifests" / "chat_cuda.toml", project / "chat_cuda.toml")
    shutil.copytree(ROOT / "manifests" / "chat", project / "chat")
    done = ptebuild("build", project / "chat_cuda.toml", "--cache", tmp_path / "cache", "--json", timeout=1200)
    if done.returncode != 0 and os.environ.get("LLM_CUDA_OUT"):  # run_on_gpu.sh's llm step: the whole log comes back
        shutil.copytree(tmp_path / "out" / "chat_cuda" / ".ptebuild" / "logs", Path(os.environ["LLM_CUDA_OUT"], "logs"),
                        dirs_exist_ok=True)
    assert done.returncode == 0, done.stderr
    program = json.loads(done.stdout)["targets"][0]
    assert program["status"] == "built" and program["check"] == "aoti-runner-cuda"
    print("chat_cuda check figures:", json.dumps(program["figures"]))
    if os.environ.get("LLM_CUDA_OUT"):  # run_on_gpu.sh's llm step: the figures for the closing note
        Path(os.environ["LLM_CUDA_OUT"], "llm-cuda.json").write_text(json.dumps(program, indent=2))
    assert all(f["cosine"] >= 0.999 for f in program["figures"])
    # The generation on the GPU: a prefill, then greedy decode steps through the program's own KV
    # cache, every step's token the eager model's (bfloat16 float program: all of them).
    prefill = next(f for f in program["figures"] if f.get("stage") == "prefill")
    decode = next(f for f in program["figures"] if f.get("stage") == "decode")
    assert prefill["sizes"] == {"prompt_tokens": 16} and prefill["dtype"] == "bfloat16"
    assert decode["tokens"] == 16 and decode["tokens_agreed"] == 16
    out = tmp_path / "out" / "chat_cuda"
    names = sorted(p.name for p in out.iterdir())
    assert {"chat_cuda.pte", "chat_cuda_weights.ptd", "chat_cuda.tokenizer.json"} <= set(names)
    metadata = {m.name: m.constant for m in api.inspect(out / "chat_cuda.pte").methods if m.returns_constant}
    assert metadata["get_max_seq_len"] == 64 and metadata["get_vocab_size"] == 256
