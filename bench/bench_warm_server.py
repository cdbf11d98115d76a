"""Benchmark (not a test): whole builds on a warm worker server, this checkout against another one.

Run: ``.venv/bin/python bench/bench_warm_server.py --baseline DIR [--runs N] [--manifest PATH]``.
``DIR`` is another checkout of ptebuild (``git worktree add /tmp/base <commit>``), which its builds
import through ``PYTHONPATH`` with this checkout's virtual environment (same torch and executorch).
The manifest (default ``tests/manifests/insight.toml``: three XNNPACK programs, float and int8,
and a portable one) is copied with its folder into a fresh temporary folder, deleted at the end.

Each side has a warm server of its own (its own ``PTEBUILD_WORKERS_DIR``: a server retires the
idle servers of other toolchains in its folder), started by an untimed build. Then the sides take
turns, ``--runs`` builds each, every build with an empty cache folder (every program lowered and
checked on the warm server) and one capability probe folder for both. Printed: each side's wall
times, their medians, and the median of the paired ratios (this checkout / the baseline).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PTEBUILD = ROOT / ".venv" / "bin" / "ptebuild"
if not PTEBUILD.exists():
    PTEBUILD = Path(sys.executable).with_name("ptebuild")


def build(manifest: Path, work: Path, env: dict[str, str]) -> float:
    cache = Path(tempfile.mkdtemp(dir=work, prefix="cache-"))
    started = time.monotonic()
    done = subprocess.run([str(PTEBUILD), "build", str(manifest), "--cache", str(cache), "--out", str(work / "out")],
                          capture_output=True, text=True, env=env)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"bench: build failed ({env.get('PYTHONPATH') or 'this checkout'}):\n{done.stderr[-3000:]}")
    shutil.rmtree(cache, ignore_errors=True)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="another checkout of ptebuild")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--manifest", type=Path, default=ROOT / "tests" / "manifests" / "insight.toml")
    args = parser.parse_args()
    if not (args.baseline / "ptebuild" / "__init__.py").is_file():
        sys.exit(f"bench: {args.baseline} is not a checkout of ptebuild (no ptebuild/__init__.py)")
    with tempfile.TemporaryDirectory(prefix="ptebuild-bench-warm-") as tmp:
        work = Path(tmp)
        project = work / "project"
        shutil.copytree(args.manifest.parent, project, ignore=shutil.ignore_patterns("__pycache__", "out"))
        manifest = project / args.manifest.name
        base = {**os.environ, "PTEBUILD_CAPABILITIES_DIR": str(work / "capabilities"), "PTEBUILD_DAEMON_IDLE": "900"}
        for name in ("PTEBUILD_EXECUTOR", "PTEBUILD_NO_DAEMON", "CI"):
            base.pop(name, None)
        sides = {
            "this checkout": {**base, "PTEBUILD_WORKERS_DIR": str(work / "workers-this")},
            "baseline": {**base, "PTEBUILD_WORKERS_DIR": str(work / "workers-base"),
                         "PYTHONPATH": os.pathsep.join(filter(None, [str(args.baseline.resolve()), base.get("PYTHONPATH")]))},
        }
        times: dict[str, list[float]] = {side: [] for side in sides}
        try:
            for env in sides.values():
                build(manifest, work, env)  # starts the side's warm server, untimed
            for run in range(args.runs):
                for side, env in sides.items():
                    times[side].append(build(manifest, work, env))
                print(f"run {run + 1}: " + ", ".join(f"{side} {times[side][-1]:.2f} s" for side in sides), flush=True)
        finally:
            for env in sides.values():
                subprocess.run([str(PTEBUILD), "workers", "stop"], env=env, capture_output=True)
    this, baseline = times["this checkout"], times["baseline"]
    ratios = [a / b for a, b in zip(this, baseline, strict=True)]
    print(f"{args.manifest.name} on a warm server, every program lowered and checked ({args.runs} runs each, alternating):")
    print(f"  this checkout {statistics.median(this):.2f} s, baseline {statistics.median(baseline):.2f} s (medians); "
          f"ratio {statistics.median(ratios):.2f}x (median of the pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
