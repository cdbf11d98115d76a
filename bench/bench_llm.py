"""Benchmark (not a test): cold builds of ``manifests/chat.toml``'s programs against ExecuTorch's own
``export_llm`` on the same configuration, side by side.

Run: ``flock /work/wt/heavy.lock .venv/bin/python bench/bench_llm.py [--runs N] [--only PROGRAM]``.
Everything is written to a fresh temporary folder, deleted at the end. For each program, each run:

* export_llm: ``python -m executorch.extension.llm.export.export_llm`` with the program's config
  spelled as Hydra overrides (model class, params, checkpoint, KV cache, dynamic shape, custom
  SDPA, lengths, qmode/group size/embedding quantization, XNNPACK, the weights file), from a
  checkpoint of the same random weights (written once, untimed: ``export_llm`` without one leaves
  RMSNorm weights and RoPE tables uninitialised), no check;
* ptebuild local: ``ptebuild build --only PROGRAM --executor local`` with an empty cache (a fresh
  worker interpreter, as ``export_llm``), which also makes the random weights, checks the program
  by generation and in ExecuTorch's TextLLMRunner, and stores it;
* ptebuild warm: the same on the warm worker server (torch and executorch imported already).

Each empty cache gets the machine's probe of what it can lower (``capabilities/``) from an untimed
first build, as a developer's cache keeps it. Printed: medians of N runs, ptebuild / export_llm,
and whether ptebuild's ``.pte`` is upstream's byte for byte but for its weights' keys and the
names of its mutable buffers (same size and the same methods).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"
PYTHON = BIN / "python" if (BIN / "python").exists() else Path(sys.executable)
PTEBUILD = BIN / "ptebuild" if (BIN / "ptebuild").exists() else Path(sys.executable).with_name("ptebuild")

# The chat model's settings, as export_llm spells them (manifests/chat.toml).
MODEL = ["base.model_class=llama3", "model.use_kv_cache=True", "model.enable_dynamic_shape=True",
         "export.max_seq_length=64", "export.max_context_length=64"]
PROGRAMS = {
    "chat_xnnpack": ["model.use_sdpa_with_kv_cache=True", "backend.xnnpack.enabled=True"],
    "chat_xnnpack_8da4w": ["model.use_sdpa_with_kv_cache=True", "backend.xnnpack.enabled=True",
                           "quantization.qmode=8da4w", "quantization.group_size=32",
                           "quantization.embedding_quantize='8,0'"],
}

CHECKPOINT = """
import json, sys, torch
from executorch.examples.models.llama.llama_transformer import construct_transformer
from executorch.examples.models.llama.model_args import ModelArgs
params = json.load(open(sys.argv[1]))
torch.manual_seed(20261203)
model = construct_transformer(ModelArgs(max_seq_len=64, max_context_len=64, max_batch_size=1, use_kv_cache=True,
                                        enable_dynamic_shape=True, **params))
torch.save(model.state_dict(), sys.argv[2])
"""


def timed(command: list, cwd: Path, env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"bench: {' '.join(map(str, command))[:200]} exited {done.returncode}:\n{done.stderr.strip()[-2000:]}")
    return seconds, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="cold builds of each column")
    parser.add_argument("--only", choices=sorted(PROGRAMS), action="append", help="these programs only")
    args = parser.parse_args()
    names = args.only or list(PROGRAMS)
    with tempfile.TemporaryDirectory(prefix="ptebuild-bench-llm-") as tmp:
        tmp = Path(tmp)
        project = tmp / "project"
        project.mkdir()
        shutil.copy(ROOT / "manifests" / "chat.toml", project / "chat.toml")
        shutil.copytree(ROOT / "manifests" / "chat", project / "chat")
        manifest = project / "chat.toml"
        params = project / "chat" / "params.json"
        checkpoint = tmp / "chat_weights.pth"
        timed([PYTHON, "-c", CHECKPOINT, params, checkpoint], cwd=tmp)
        workers = {"PTEBUILD_WORKERS_DIR": str(tmp / "workers")}
        probed = tmp / "probed"
        counter = iter(range(10**6))

        def ptebuild(name: str, *extra: str, first: bool = False) -> tuple[float, dict]:
            run = next(counter)
            cache = probed if first else tmp / f"cache{run}"
            if not first and (probed / "capabilities").is_dir():
                shutil.copytree(probed / "capabilities", cache / "capabilities")
            seconds, done = timed([PTEBUILD, "build", manifest, "--only", name, "--cache", cache,
                                   "--out", tmp / f"out{run}", "--json", *extra], cwd=tmp, env=workers)
            program = json.loads(done.stdout)["targets"][0]
            if program["status"] != "built":
                sys.exit(f"bench: {name} was {program['status']}, not built")
            return seconds, program

        def export_llm(name: str, run: int) -> tuple[float, Path]:
            folder = tmp / f"upstream{run}"
            folder.mkdir()
            weights = f"export.foundation_weights_file={name}_weights"
            seconds, _ = timed([PYTHON, "-m", "executorch.extension.llm.export.export_llm", f"base.params={params}",
                                f"base.checkpoint={checkpoint}", *MODEL, *PROGRAMS[name], weights,
                                f"export.output_name={name}.pte"], cwd=folder)
            return seconds, folder / f"{name}.pte"

        print(f"ptebuild {PTEBUILD}, {os.cpu_count()} cores, {args.runs} runs", flush=True)
        for name in names:  # starts the warm server, probes the backend (untimed)
            ptebuild(name, first=True)
        rows = []
        for name in names:
            upstream, local, warm = [], [], []
            for i in range(args.runs):
                seconds, theirs = export_llm(name, next(counter))
                upstream.append(seconds)
                seconds, program = ptebuild(name, "--executor", "local")
                local.append(seconds)
                seconds, program = ptebuild(name)
                warm.append(seconds)
                ours = next(Path(o["path"]) for o in program["outputs"] if o["path"].endswith(".pte"))
                same_size = ours.stat().st_size == theirs.stat().st_size
                print(f"{name} run {i + 1}: export_llm {upstream[-1]:.1f} s, ptebuild local {local[-1]:.1f} s, "
                      f"warm {warm[-1]:.1f} s; .pte {ours.stat().st_size} bytes (export_llm's "
                      f"{theirs.stat().st_size}{', same size' if same_size else ''})", flush=True)
                if i == 0:  # which parts of the two programs differ (ptebuild diff)
                    diff = subprocess.run([str(PTEBUILD), "diff", theirs, ours], capture_output=True, text=True)
                    print("  ptebuild diff export_llm's ptebuild's:", "; ".join(diff.stdout.split("\n")[:12]), flush=True)
            rows.append((name, statistics.median(upstream), statistics.median(local), statistics.median(warm)))
        subprocess.run([str(PTEBUILD), "workers", "stop"], env={**os.environ, **workers}, capture_output=True)
    print()
    print(f"{'program':20s}  {'export_llm':>10s}  {'ptebuild local':>14s}  {'ratio':>6s}  {'ptebuild warm':>13s}  {'ratio':>6s}")
    for name, theirs, local_s, warm_s in rows:
        print(f"{name:20s}  {theirs:9.1f}s  {local_s:13.1f}s  {local_s / theirs:5.2f}x  {warm_s:12.1f}s  {warm_s / theirs:5.2f}x")
    print(f"(medians of {args.runs} cold runs each; ratio = ptebuild / export_llm; ptebuild includes its check)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
