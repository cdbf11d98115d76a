"""Benchmark (not a test): no-op builds against Python start-up, side by side, as ratios.

Run: ``.venv/bin/python bench/bench_noop.py [--runs N]``. Two manifests, each built once cold
into a fresh temporary cache and output folder, then timed with nothing to do, interleaved with
``python -c pass`` on the same interpreter (the machine is shared and noisy: only the ratio of
medians taken side by side means anything):

* ``manifests/robot.toml`` (3 programs): target no-op <= 3x Python start-up;
* a generated manifest of 50 programs (25 variants of the tiny test model, portable and
  XNNPACK, checks off to keep the cold build short): target <= 4x Python start-up, so that the
  cost of a no-op does not grow much with the number of programs.

The stamped no-op (:mod:`ptebuild.builder.noop`) is what a repeated build costs; the full no-op
path (the stamp removed, as after an edit that changes nothing) is printed beside it, not held
to the target.

Every timed run must report each program ``cached`` (``--json``); ``-X importtime`` checks once
per manifest that torch, executorch and pydantic are not imported. Takes about 3 minutes on 2
cores, most of it the cold builds.
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
TINY = ROOT / "tests" / "manifests"

TARGETS = {"robot": 3.0, "fifty": 4.0}


def fifty_programs(folder: Path) -> Path:
    """A manifest of 50 programs over the tiny test model (25 widths x portable, XNNPACK)."""
    shutil.copytree(TINY / "tinymodels", folder / "tinymodels", ignore=shutil.ignore_patterns("__pycache__"))
    lines = ['[defaults]\nout = "out"\ncheck = { enabled = false }\n']
    for i in range(25):
        lines.append(
            f"""
[models.tiny{i}]
factory = "tinymodels.tiny:make_tiny"
kwargs = {{ width = {8 + i} }}
seed = {i}
[models.tiny{i}.methods.forward]
inputs = [{{ name = "x", shape = [2, 6] }}]
"""
        )
        for backend in ("portable", "xnnpack"):
            lines.append(
                f'[programs.tiny{i}_{backend}]\nmodel = "tiny{i}"\nbackend = "{backend}"\n'
                f'data_name = "tiny{i}_{backend}_weights"\n'
            )
    manifest = folder / "fifty.toml"
    manifest.write_text("".join(lines))
    return manifest


# As on a user's machine: bytecode is cached (a PYTHONDONTWRITEBYTECODE in the caller's environment
# would recompile every ptebuild module on every run, and python -c pass compiles nothing).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run(command: list) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run([str(c) for c in command], cwd=ROOT, capture_output=True, text=True, env=ENV)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"bench: {' '.join(map(str, command))} exited {done.returncode}:\n{done.stderr.strip()[-2000:]}")
    return seconds, done


def measure(name: str, manifest: Path, tmp: Path, runs: int) -> dict:
    cache, out = tmp / f"cache-{name}", tmp / f"out-{name}"
    build = [PTEBUILD, "build", manifest, "--cache", cache, "--out", out, "--json"]
    cold, done = run(build)
    programs = len(json.loads(done.stdout)["programs"])
    print(f"{name}: cold build of {programs} programs in {cold:.1f} s", flush=True)
    time.sleep(1.0)  # the no-op stamp does not trust files written in the last half second
    run(build)  # the first no-op writes state (plan cache, stat cache, the no-op stamp)
    _, traced = run([PYTHON, "-X", "importtime", "-m", "ptebuild", *build[1:]])
    heavy = sorted({line.split("|")[-1].strip().split(".")[0] for line in traced.stderr.splitlines()
                    if line.split("|")[-1].strip().split(".")[0] in ("torch", "executorch", "pydantic")})
    noop_ms, python_ms, rebuilt = [], [], 0
    for i in range(runs):
        pair = [("noop", build), ("python", [PYTHON, "-c", "pass"])]
        for kind, command in pair if i % 2 == 0 else reversed(pair):
            seconds, done = run(command)
            if kind == "noop":
                noop_ms.append(seconds * 1000)
                rebuilt += any(p["status"] != "cached" for p in json.loads(done.stdout)["programs"])
            else:
                python_ms.append(seconds * 1000)
    noop, python = statistics.median(noop_ms), statistics.median(python_ms)
    # The full no-op path, as after any edit that changes nothing (stamp removed before each run).
    full_ms = []
    for _ in range(runs):
        shutil.rmtree(cache / "noop", ignore_errors=True)
        seconds, done = run(build)
        full_ms.append(seconds * 1000)
        rebuilt += any(p["status"] != "cached" for p in json.loads(done.stdout)["programs"])
    full = statistics.median(full_ms)
    return {"name": name, "programs": programs, "noop": noop, "python": python, "ratio": noop / python,
            "rebuilt": rebuilt, "heavy": heavy, "cold": cold, "full": full}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="no-op runs per manifest, each paired with python -c pass")
    args = parser.parse_args()
    print(f"ptebuild {PTEBUILD}, python {PYTHON}, {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory(prefix="ptebuild-bench-noop-") as tmp:
        tmp = Path(tmp)
        rows = [
            measure("robot", ROOT / "manifests" / "robot.toml", tmp, args.runs),
            measure("fifty", fifty_programs(tmp / "fifty"), tmp, args.runs),
        ]
    print()
    ok = True
    for r in rows:
        target = TARGETS[r["name"]]
        good = r["ratio"] <= target and not r["rebuilt"] and not r["heavy"]
        ok &= good
        print(
            f"{r['name']:6} {r['programs']:3} programs: no-op median {r['noop']:7.1f} ms, python -c pass "
            f"{r['python']:6.1f} ms -> {r['ratio']:.2f}x (target <= {target:.0f}x: {'ok' if good else 'MISSED'}); "
            f"timed runs that rebuilt: {r['rebuilt']}; heavy imports: {r['heavy'] or 'none'}"
        )
        print(
            f"{'':6} {'':3}           full no-op path (no stamp): median {r['full']:7.1f} ms -> "
            f"{r['full'] / r['python']:.2f}x python start-up (not a target: after an edit that changes nothing)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
