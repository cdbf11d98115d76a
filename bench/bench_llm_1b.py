"""Benchmark (not a test): a decoder of Llama-3.2-1B's dimensions, 8da4w with 8-bit embeddings, for
XNNPACK, built by ptebuild (with its check) and by ExecuTorch's own ``export_llm`` on the same
configuration, side by side and alternating: wall time and peak RSS of both, and their ratios.

Run (it needs most of this machine's memory): ``flock /work/wt/heavy.lock .venv/bin/python
bench/bench_llm_1b.py [--pairs N]``. Everything goes to a fresh temporary folder, deleted at the end.
Each ptebuild build also prints its stages (``--timings``: import, export, emitting, checking,
storing); ``--ptebuild-only`` builds with ptebuild alone (no ratio), to profile its side.

Set-up, untimed:

* the model: Llama-3.2-1B's params (dim 2048, 16 layers, 32 heads, 8 KV heads, vocab 128256, FFN
  8192, RoPE theta 500000 scaled as llama3_2's), random weights from a seed in bfloat16 (as the
  released checkpoint), the output layer tied to the embedding (one tensor, saved once), written
  once as a checkpoint both tools read (``base.checkpoint``; nothing is downloaded);
* a tokenizer of exactly 128256 ASCII pieces (``tests/models/smollm2/make_tokenizer.py``: the check's
  runner decodes whatever id a random model generates), the metadata ptebuild derives from it
  (BOS 0, EOS 1) given to both;
* the capability probe of this toolchain (``$PTEBUILD_CAPABILITIES_DIR``, from a build of the tiny
  chat model), as a developer's cache keeps it.

Timed, per pair (export_llm first, then ptebuild):

* export_llm: ``python -m executorch.extension.llm.export.export_llm`` with the program's settings as
  Hydra overrides (llama3_2, KV cache, custom SDPA, dynamic shape, max_seq_length 128, context
  2048, qmode 8da4w, group size 32, embedding_quantize 8,0, XNNPACK, the weights in a .ptd);
* ptebuild: ``ptebuild build --executor local`` (a fresh worker interpreter, as export_llm is one
  process) with an empty cache: upstream's export, the weights keyed by SHA-256, the check by
  generation in ExecuTorch's runtime and TextLLMRunner, the files stored into the cache.

Peak memory: the process tree's resident memory summed as each process's proportional share
(PSS: a page shared by forked processes counts once), sampled every 0.1 s (``/proc``), and the
largest single process's exact peak RSS (``ru_maxrss`` of the waited-for children). After the last
pair: a no-op build (outputs in place) and a restore from the cache into an empty folder.
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
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"
PYTHON = BIN / "python" if (BIN / "python").exists() else Path(sys.executable)
PTEBUILD = BIN / "ptebuild" if (BIN / "ptebuild").exists() else Path(sys.executable).with_name("ptebuild")

PARAMS = {"dim": 2048, "n_layers": 16, "n_heads": 32, "n_kv_heads": 8, "vocab_size": 128256,
          "ffn_dim_multiplier": 1.5, "multiple_of": 256, "norm_eps": 1e-05, "rope_theta": 500000.0,
          "use_scaled_rope": True}
"""Llama-3.2-1B's params.json (the FFN width 8192 follows from the multiplier and multiple_of)."""
SEED = 1
MAX_SEQ, MAX_CONTEXT = 128, 2048
METADATA = {"get_bos_id": 0, "get_eos_ids": [1]}

MANIFEST = f"""
[defaults]
out = "out"

[models.llama1b]
kind = "executorch-llm"
model_class = "llama3_2"
params = "params.json"
checkpoint = "weights.pth"
tokenizer = "tokenizer.json"
max_seq_length = {MAX_SEQ}
max_context_length = {MAX_CONTEXT}

[programs.llama1b_8da4w]
model = "llama1b"
backend = "xnnpack"
data_name = "llama1b_8da4w_weights"
options = {{ use_sdpa_with_kv_cache = true, qmode = "8da4w", group_size = 32, embedding_quantize = "8,0" }}
"""

EXPORT_LLM = [
    "base.model_class=llama3_2", "model.use_kv_cache=True", "model.use_sdpa_with_kv_cache=True",
    "model.enable_dynamic_shape=True", f"export.max_seq_length={MAX_SEQ}", f"export.max_context_length={MAX_CONTEXT}",
    "quantization.qmode=8da4w", "quantization.group_size=32", "quantization.embedding_quantize='8,0'",
    "backend.xnnpack.enabled=True", "export.foundation_weights_file=llama1b_8da4w_weights",
    "export.output_name=llama1b_8da4w.pte",
]

CHECKPOINT = """
import json, sys, torch
from executorch.examples.models.llama.llama_transformer import construct_transformer
from executorch.examples.models.llama.model_args import ModelArgs
params = json.load(open(sys.argv[1]))
torch.manual_seed(int(sys.argv[3]))
model = construct_transformer(ModelArgs(max_seq_len=128, max_context_len=2048, max_batch_size=1, **params))
state = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
del model
state["output.weight"] = state["tok_embeddings.weight"]  # tied, as Llama-3.2-1B's: saved once
torch.save(state, sys.argv[2])
print(sum(v.numel() for k, v in state.items() if k != "output.weight"))
"""


class TreeMemory:
    """Samples the summed PSS of a process and its descendants until stopped."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid, self.interval, self.peak = pid, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _children(self) -> dict[int, list[int]]:
        tree: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            tree.setdefault(int(fields[1]), []).append(int(entry))
        return tree

    def _rss(self, pid: int) -> int:
        """The process's proportional set size (its share of pages shared with others: a tree's
        sum counts a page shared by a fork once), else its RSS."""
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        try:
            with open(f"/proc/{pid}/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            return 0

    def _run(self) -> None:
        while not self._stop.is_set():
            tree, total, todo = self._children(), 0, [self.pid]
            while todo:
                pid = todo.pop()
                total += self._rss(pid)
                todo += tree.get(pid, [])
            self.peak = max(self.peak, total)
            self._stop.wait(self.interval)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def measured(command: list, cwd: Path, env: dict | None = None) -> tuple[float, int, int, subprocess.CompletedProcess]:
    """Run ``command`` in a wrapper interpreter that reports its children's exact peak RSS.
    Returns (seconds, sampled tree peak bytes, largest single process peak bytes, result)."""
    wrapper = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
               "print('maxrss', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
               "sys.exit(done.returncode)")
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", wrapper, *map(str, command)], cwd=cwd, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
    sampler = TreeMemory(process.pid)
    stdout, stderr = process.communicate()
    seconds = time.perf_counter() - start
    tree_peak = sampler.stop()
    done = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    if done.returncode != 0:
        sys.exit(f"bench: {' '.join(map(str, command))[:300]} exited {done.returncode}:\n{stderr.strip()[-3000:]}")
    maxrss = next(int(line.split()[1]) for line in reversed(stderr.splitlines()) if line.startswith("maxrss "))
    return seconds, tree_peak, maxrss * 1024, done


def stage_seconds(out: Path) -> str:
    """The program's stages as ``--timings`` wrote them (its Chrome trace): seconds each."""
    trace = json.loads((out / ".ptebuild" / "timings.trace.json").read_text())
    spans = [e for e in trace["traceEvents"] if e.get("cat") == "stage"]
    return ", ".join(f"{e['name']} {e['dur'] / 1e6:.1f} s" for e in sorted(spans, key=lambda e: e["ts"]))


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1, help="export_llm/ptebuild pairs, alternating")
    parser.add_argument("--keep", type=Path, help="copy the built programs here (for a look afterwards)")
    parser.add_argument("--dry", action="store_true", help="a model of 2 layers, 128 wide (tries the script, measures nothing)")
    parser.add_argument("--ptebuild-only", action="store_true",
                        help="build with ptebuild only: no export_llm, no ratio (to profile ptebuild's side)")
    args = parser.parse_args()
    params = dict(PARAMS, dim=128, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=512) if args.dry else PARAMS
    with tempfile.TemporaryDirectory(prefix="ptebuild-bench-llm1b-") as tmp:
        tmp = Path(tmp)
        project = tmp / "project"
        project.mkdir()
        (project / "params.json").write_text(json.dumps(params))
        (project / "llama1b.toml").write_text(MANIFEST)
        started = time.perf_counter()
        made = subprocess.run([str(PYTHON), "-c", CHECKPOINT, project / "params.json", project / "weights.pth", str(SEED)],
                              capture_output=True, text=True, check=True)
        parameters = int(made.stdout.split()[-1])
        subprocess.run([str(PYTHON), ROOT / "tests" / "models" / "smollm2" / "make_tokenizer.py",
                        project / "tokenizer.json", str(params["vocab_size"])], check=True)
        env = {"PTEBUILD_CAPABILITIES_DIR": str(tmp / "capabilities"), "PTEBUILD_WORKERS_DIR": str(tmp / "workers")}
        chat = tmp / "chat"
        chat.mkdir()
        shutil.copy(ROOT / "manifests" / "chat.toml", chat / "chat.toml")
        shutil.copytree(ROOT / "manifests" / "chat", chat / "chat")
        subprocess.run([str(PTEBUILD), "build", chat / "chat.toml", "--only", "chat_xnnpack_8da4w", "--executor", "local",
                        "--cache", tmp / "chat-cache", "--out", tmp / "chat-out"], check=True, capture_output=True,
                       env={**os.environ, **env})
        print(f"set-up {time.perf_counter() - started:.0f} s: {parameters / 1e9:.3f} B parameters "
              f"(checkpoint {gib((project / 'weights.pth').stat().st_size)}, bfloat16); ptebuild {PTEBUILD}, "
              f"{os.cpu_count()} cores, {args.pairs} pair(s)", flush=True)

        theirs: list[tuple[float, int, int]] = []
        ours: list[tuple[float, int, int]] = []
        for pair in range(args.pairs):
            folder = tmp / f"upstream{pair}"
            folder.mkdir()
            if not args.ptebuild_only:
                seconds, tree, single, _ = measured(
                    [PYTHON, "-m", "executorch.extension.llm.export.export_llm", f"base.params={project / 'params.json'}",
                     f"base.checkpoint={project / 'weights.pth'}", f"base.tokenizer_path={project / 'tokenizer.json'}",
                     f"base.metadata='{json.dumps(METADATA)}'", *EXPORT_LLM], cwd=folder)
                theirs.append((seconds, tree, single))
                sizes = {p.name: p.stat().st_size for p in folder.iterdir() if p.suffix in (".pte", ".ptd")}
                print(f"pair {pair + 1}: export_llm {seconds:.1f} s, peak memory {gib(tree)} (largest process RSS {gib(single)}); "
                      f"files {sizes}", flush=True)
            seconds, tree, single, done = measured(
                [PTEBUILD, "build", project / "llama1b.toml", "--executor", "local", "--cache", tmp / f"cache{pair}",
                 "--out", tmp / f"out{pair}", "--json", "-j1", "--timings"], cwd=tmp, env=env)
            ours.append((seconds, tree, single))
            program = json.loads(done.stdout)["targets"][0]
            if program["status"] != "built":
                sys.exit(f"bench: ptebuild's program was {program['status']}, not built")
            sizes = {Path(o["path"]).name: o["bytes"] for o in program["outputs"] if o["path"].endswith((".pte", ".ptd"))}
            print(f"pair {pair + 1}: ptebuild {seconds:.1f} s (the program's own {program['seconds']:.1f} s), peak memory {gib(tree)} (largest process RSS {gib(single)}); "
                  f"files {sizes}; check {json.dumps(program['figures'])}", flush=True)
            print(f"pair {pair + 1}: ptebuild's stages {stage_seconds(tmp / f'out{pair}')}", flush=True)
            if args.keep and pair == 0:
                args.keep.mkdir(parents=True, exist_ok=True)
                for path in list(folder.glob("*.pt[ed]")) + list((tmp / "out0").glob("*.pt[ed]")):
                    shutil.copy(path, args.keep / (("export_llm." if path.parent == folder else "ptebuild.") + path.name))
            if pair < args.pairs - 1:
                shutil.rmtree(folder)

        last = args.pairs - 1
        noop, _, _, done = measured([PTEBUILD, "build", project / "llama1b.toml", "--executor", "local", "--cache",
                                     tmp / f"cache{last}", "--out", tmp / f"out{last}", "--json"], cwd=tmp, env=env)
        statuses = [p["status"] for p in json.loads(done.stdout)["targets"]]
        restore, _, _, done = measured([PTEBUILD, "build", project / "llama1b.toml", "--executor", "local", "--cache",
                                        tmp / f"cache{last}", "--out", tmp / "restored", "--json"], cwd=tmp, env=env)
        restored = [p["status"] for p in json.loads(done.stdout)["targets"]]
        subprocess.run([str(PTEBUILD), "workers", "stop"], env={**os.environ, **env}, capture_output=True)

    if args.ptebuild_only:
        return 0
    print()
    t_seconds, t_tree, t_single = (statistics.median(x) for x in zip(*theirs, strict=True))
    o_seconds, o_tree, o_single = (statistics.median(x) for x in zip(*ours, strict=True))
    print(f"{'':24s}  {'export_llm':>12s}  {'ptebuild':>12s}  {'ratio':>6s}")
    print(f"{'wall time':24s}  {t_seconds:11.1f}s  {o_seconds:11.1f}s  {o_seconds / t_seconds:5.2f}x")
    print(f"{'peak PSS (process tree)':24s}  {gib(t_tree):>12s}  {gib(o_tree):>12s}  {o_tree / t_tree:5.2f}x")
    print(f"{'peak RSS (one process)':24s}  {gib(t_single):>12s}  {gib(o_single):>12s}  {o_single / t_single:5.2f}x")
    print(f"(medians of {args.pairs} pair(s); ratio = ptebuild / export_llm; ptebuild includes its check and storing)")
    print(f"no-op build {noop:.2f} s ({', '.join(statuses)}); restore from the cache into an empty folder "
          f"{restore:.2f} s ({', '.join(restored)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
