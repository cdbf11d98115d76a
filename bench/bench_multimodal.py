"""Benchmark (not a test): a cold build of ``manifests/speech.toml``'s XNNPACK program against
ExecuTorch's own Voxtral Realtime export script on the same model, side by side.

Run: ``flock /work/wt/heavy.lock .venv/bin/python bench/bench_multimodal.py [--runs N]``. Everything is
written to a fresh temporary folder, deleted at the end. The model's random weights (the manifest's
params and seed) are written once, untimed, as ``consolidated.safetensors`` beside its
``params.json``: the checkpoint upstream's script takes. Then, in turn, each run:

* upstream: ``python -m executorch.examples.models.voxtral_realtime.export_voxtral_rt --model-path
  DIR --backend xnnpack --max-seq-len 64`` (its own audio bound, 240 s), no check;
* ptebuild: ``ptebuild build --only asr_xnnpack --executor local`` of a copy of the manifest that
  names the same checkpoint, with an empty cache (a fresh worker interpreter, as upstream's script),
  the check against the eager model and in ExecuTorch's MultimodalRunner included. An untimed
  first build warms the installer's and Python's own caches; each empty cache gets the machine's
  capability verdict from it where that build made one, as a developer's cache keeps it.

Printed: the medians of wall time and of peak memory (each command's largest process: ``ru_maxrss``
of it and the processes it waited for, in a fresh process per command), and ptebuild / upstream.
"""

from __future__ import annotations

import argparse
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

CHECKPOINT = """
import sys
from pathlib import Path
from ptebuild.models.multimodal.voxtral import random_checkpoint
random_checkpoint(Path(sys.argv[1]), int(sys.argv[2]), 64, "xnnpack", Path(sys.argv[3]))
"""


PEAK = """
import resource, subprocess, sys
code = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""
"""Runs a command and prints the largest resident set (KiB) among it and the processes it waited for."""


def timed(command: list, cwd: Path) -> tuple[float, float]:
    """Wall seconds and the peak resident set (MiB) of ``command``: its largest process, itself or
    one it waited for (each command measured in a fresh process of its own)."""
    started = time.perf_counter()
    done = subprocess.run([str(PYTHON), "-c", PEAK, *map(str, command)], cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"bench: {' '.join(map(str, command))} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return seconds, int(done.stderr.strip().splitlines()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-multimodal-"))
    try:
        model = work / "model"
        model.mkdir()
        shutil.copy(ROOT / "manifests" / "speech" / "params.json", model / "params.json")
        subprocess.run([PYTHON, "-c", CHECKPOINT, model / "params.json", "20261207", model / "consolidated.safetensors"],
                       check=True, capture_output=True)
        (work / "chat").mkdir()
        shutil.copy(ROOT / "manifests" / "chat" / "tokenizer.json", work / "chat" / "tokenizer.json")
        manifest = work / "speech.toml"
        manifest.write_text((ROOT / "manifests" / "speech.toml").read_text()
                            .replace('out = "../out/speech"', 'out = "out"')
                            .replace('params = "speech/params.json"', 'params = "model/params.json"\ncheckpoint = "model/consolidated.safetensors"'))
        probe = work / "probe-cache"
        timed([PTEBUILD, "build", manifest, "--only", "asr_xnnpack", "--executor", "local", "--cache", probe], work)
        upstream, ours = [], []
        for run in range(args.runs):
            for which in (("upstream", "ptebuild") if run % 2 == 0 else ("ptebuild", "upstream")):
                if which == "upstream":
                    out = work / f"upstream-{run}"
                    figures = timed([PYTHON, "-m", "executorch.examples.models.voxtral_realtime.export_voxtral_rt",
                                     "--model-path", model, "--backend", "xnnpack", "--output-dir", out, "--max-seq-len", "64"], work)
                    upstream.append(figures)
                else:
                    cache = work / f"cache-{run}"
                    if (probe / "capabilities").is_dir():  # a probe runs only where a build needs one
                        shutil.copytree(probe / "capabilities", cache / "capabilities")
                    shutil.rmtree(work / "out", ignore_errors=True)
                    figures = timed([PTEBUILD, "build", manifest, "--only", "asr_xnnpack", "--executor", "local", "--cache", cache], work)
                    ours.append(figures)
                print(f"run {run + 1}: {which}: {figures[0]:.1f} s", flush=True)
        for name, index, unit in (("wall", 0, "s"), ("peak memory", 1, "MiB")):
            theirs, mine = statistics.median(f[index] for f in upstream), statistics.median(f[index] for f in ours)
            print(f"{name:12s} upstream {theirs:8.1f} {unit}  ptebuild {mine:8.1f} {unit}  ptebuild / upstream {mine / theirs:.2f}x")
        print("peak memory: each command's largest process (its own or a worker's resident set), not the tree's sum")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
