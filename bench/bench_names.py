"""Benchmark (not a test): how long a manifest with a bad data name takes to fail.

Run: ``.venv/bin/python bench/bench_names.py [--runs N]``. For each hostile name, the robot
manifest is copied to a temporary folder with that name as a data name, and ``ptebuild build``
must exit 2 with one line, without importing torch. Its median time is printed side by side with
``python -c pass`` on the same interpreter, run interleaved (the machine is shared and noisy).
Target: under one second; in practice about Python's start-up plus pydantic.
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

HOSTILE_NAMES = ["../../outside", "NUL.weights", "weights.ptd", "Policy_Weights"]


def timed(command: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    return time.perf_counter() - start, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory(prefix="ptebuild-bench-names-") as tmp:
        project = Path(tmp) / "manifests"
        shutil.copytree(ROOT / "manifests", project, ignore=shutil.ignore_patterns("__pycache__"))
        text = (project / "robot.toml").read_text()
        baseline = []
        print(f"{'data name':28} {'median':>9} {'python -c pass':>15} {'difference':>11}  message")
        for name in HOSTILE_NAMES:
            manifest = project / "bad.toml"
            # The last name collides by case with the other program's data name.
            manifest.write_text(text.replace('"policy_xnnpack_int8_weights"', f'"{name}"'))
            times = []
            for _ in range(args.runs):
                baseline.append(timed([str(PYTHON), "-c", "pass"])[0])
                seconds, done = timed([str(PYTHON), "-m", "ptebuild", "build", str(manifest), "--no-cache"])
                times.append(seconds)
                if done.returncode != 2 or len(done.stderr.strip().splitlines()) != 1:
                    failures += 1
                    print(f"unexpected: exit {done.returncode}: {done.stderr.strip()}", file=sys.stderr)
            median, base = statistics.median(times), statistics.median(baseline)
            message = done.stderr.strip().split(": ", 2)[-1][:60]
            print(f"{name:28} {median * 1000:7.1f}ms {base * 1000:13.1f}ms {(median - base) * 1000:9.1f}ms  {message}")
            if median >= 1.0:
                failures += 1
    print(f"{args.runs} runs each, interleaved with python -c pass; target: under 1 s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
