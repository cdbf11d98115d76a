"""On the GPU machine: manifests/chat_cuda.toml, the tiny chat decoder in bfloat16, lowered by
ExecuTorch's CUDA backend from ExecuTorch's LLM export of the model and checked on the GPU."""

from __future__ import annotations

import json
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
    assert done.returncode == 0, done.stderr
    program = json.loads(done.stdout)["programs"][0]
    assert program["status"] == "built" and program["check_kind"] == "aoti-runner-cuda"
    print("chat_cuda check figures:", json.dumps(program["check"]))
    assert all(f["cosine"] >= 0.999 for f in program["check"])
    out = tmp_path / "out" / "chat_cuda"
    names = sorted(p.name for p in out.iterdir())
    assert {"chat_cuda.pte", "chat_cuda_weights.ptd", "chat_cuda.tokenizer.json"} <= set(names)
    metadata = {m.name: m.constant for m in api.inspect(out / "chat_cuda.pte").methods if m.returns_constant}
    assert metadata["get_max_seq_len"] == 64 and metadata["get_vocab_size"] == 256
