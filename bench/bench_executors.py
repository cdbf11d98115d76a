"""Benchmark (not a test): the warm worker server and Ray against the local worker pool.

Run: ``.venv/bin/python bench/bench_executors.py [--runs N] [--manifest tiny|robot] [--no-ray]``.
Everything is written to a fresh temporary folder that is deleted at the end (the warm server it
starts is stopped there too); nothing is written into the repository. The CLI runs as a
subprocess (``python -m ptebuild``), as a user runs it.

Figures printed, side by side, medians of N runs:

* **edit one model, rebuild one program**: the project is built once; then each run appends a
  comment to the model's source file (a new key: a real rebuild, same bytes) and rebuilds one
  program with ``--only``, with ``--executor local`` (a fresh worker process imports torch and
  executorch) and with ``--executor daemon`` (the warm server, started by a warm-up build that is
  not timed). Beside them, the worker's own time to build, export and lower the program (from
  its action record; the check against eager PyTorch comes on top) and the rest of the wall
  time: the issue's target for the warm server is "lowering time plus at most 1 s".
* **whole manifest, cold**: ``--no-cache`` builds with ``--executor local`` and ``--executor ray``
  (a local Ray instance started by the build, on loopback): the overhead of Ray on one machine.
  The outputs of both must be byte-identical (checked).
"""

from __future__ import annotations

import argparse
import hashlib
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
PYTHON = ROOT / ".venv" / "bin" / "python"
if not PYTHON.exists():
    PYTHON = Path(sys.executable)

PROJECTS = {
    # name: (folder to copy, manifest, model source to edit, program to rebuild)
    "tiny": (ROOT / "tests" / "manifests", "tiny.toml", "tinymodels/tiny.py", "tiny_xnnpack"),
    "robot": (ROOT / "manifests", "robot.toml", "models/robot_policy.py", "policy_xnnpack"),
}


def copy_project(name: str, dest: Path) -> Path:
    source, manifest, _model, _program = PROJECTS[name]
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__", "bad-*.toml"))
    return dest / manifest


def build(manifest: Path, out: Path, env: dict, *args: str) -> tuple[float, dict]:
    started = time.monotonic()
    done = subprocess.run(
        [str(PYTHON), "-m", "ptebuild", "build", str(manifest), "--out", str(out), "--json", *args],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"build failed ({' '.join(args)}):\n{done.stderr[-3000:]}")
    return seconds, json.loads(done.stdout)


def outputs(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.pt[ed]"))}


def stop_servers(cache: Path) -> None:
    subprocess.run([str(PYTHON), "-m", "ptebuild", "workers", "stop", "--cache", str(cache)], capture_output=True)


def lower_seconds(cache: Path, key: str) -> float:
    """The worker's own time to build, export and lower the program (from its action record)."""
    from ptebuild.store import Store

    record = Store(cache).actions.get(key) or {}
    return float(record.get("lower_seconds") or "nan")


def median(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f}s"


def edit_rebuild(name: str, runs: int, work: Path) -> None:
    _source, _manifest, model, program = PROJECTS[name]
    print(f"edit one model, rebuild {program} ({name}), {runs} runs each")
    rows = []
    for executor in ("local", "daemon"):
        folder = work / f"edit-{executor}"
        manifest = copy_project(name, folder / "project")
        cache = folder / "cache"
        env = {**os.environ, "PTEBUILD_CACHE": str(cache)}
        env.pop("PTEBUILD_NO_DAEMON", None)
        common = ("--executor", executor, "--cache", str(cache), "--only", program)
        build(manifest, folder / "out", env, *common)  # warm-up: fills the cache, starts the server
        walls, lowering = [], []
        for run in range(runs):
            with open(manifest.parent / model, "a") as source:
                source.write(f"\n# bench edit {run}\n")
            seconds, report = build(manifest, folder / "out", env, *common)
            [entry] = [p for p in report["targets"] if p["name"] == program]
            if entry["status"] != "built":
                sys.exit(f"{executor}: {program} was {entry['status']} after an edit, not built")
            walls.append(seconds)
            lowering.append(lower_seconds(cache, entry["key"]))
        stop_servers(cache)
        rows.append((executor, walls, lowering))
    print(f"  {'executor':10} {'wall (median)':>14} {'lowering (median)':>18} {'wall - lowering':>16}   runs")
    for executor, walls, lowering in rows:
        overhead = statistics.median(w - lw for w, lw in zip(walls, lowering))
        print(f"  {executor:10} {median(walls):>14} {median(lowering):>18} {overhead:15.2f}s   "
              f"{' '.join(f'{w:.1f}' for w in walls)}")
    local, daemon = (statistics.median(r[1]) for r in rows)
    print(f"  warm server saves {local - daemon:.1f}s per edit-rebuild ({local / daemon:.1f}x faster)")


def ray_against_local(name: str, runs: int, work: Path) -> None:
    print(f"whole manifest ({name}), cold (--no-cache), {runs} runs each")
    rows, hashes = [], {}
    for executor in ("local", "ray"):
        manifest = copy_project(name, work / f"cold-{executor}" / "project")
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        env.pop("RAY_ADDRESS", None)  # the build starts its own local Ray instance
        walls = []
        for run in range(runs):
            out = work / f"cold-{executor}" / f"out{run}"
            seconds, _report = build(manifest, out, env, "--executor", executor, "--no-cache")
            walls.append(seconds)
            hashes.setdefault(executor, outputs(out))
        rows.append((executor, walls))
    print(f"  {'executor':10} {'wall (median)':>14}   runs")
    for executor, walls in rows:
        print(f"  {executor:10} {median(walls):>14}   {' '.join(f'{w:.1f}' for w in walls)}")
    same = hashes["local"] == hashes["ray"]
    print(f"  outputs byte-identical: {'yes' if same else 'NO'} ({len(hashes['local'])} files)")
    if not same:
        sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--manifest", choices=sorted(PROJECTS), default="tiny")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray comparison")
    parser.add_argument("--no-edit", action="store_true", help="skip the edit-rebuild comparison")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-executors-"))
    try:
        if not args.no_edit:
            edit_rebuild(args.manifest, args.runs, work)
        if not args.no_ray:
            try:
                import ray  # noqa: F401
            except ImportError:
                print("Ray comparison skipped: Ray is not installed (pip install 'ptebuild[ray]')")
            else:
                ray_against_local(args.manifest, args.runs, work)
    finally:
        for cache in work.glob("*/cache"):
            stop_servers(cache)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
