"""Benchmark (not a test): cold, no-op and one-model-changed builds of ``manifests/robot.toml``.

Run: ``.venv/bin/python bench/bench_build.py [--runs N] [--jobs J]``. Everything is written to a
fresh temporary folder (cache via ``--cache``, outputs via ``--out``) that is deleted at the end;
nothing is written into the repository. The CLI runs as a subprocess (``.venv/bin/ptebuild``).

Figures printed:

* cold: one build with an empty cache (seconds);
* no-op: median of N builds with nothing to do, interleaved with ``python -c pass`` on the same
  interpreter (process start-up baseline); targets: no-op <= start-up + 150 ms, cold/no-op >= 100x;
* one model changed: ``manifests/`` copied, a second model ``models2.robot_policy`` (a copy of the
  first) and one program for it added; built once, then one comment appended to
  ``models2/robot_policy.py`` and rebuilt with ``--json``: only that model's program must rebuild.

Takes about 3 minutes on 2 cores.
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

NOOP_LIMIT_MS = 150.0
RATIO_TARGET = 100.0

SECOND_MODEL = """
[models.policy2]
factory = "models2.robot_policy:make_policy"
kwargs = { image_size = 96, state_dim = 14, action_dim = 7, chunk = 16, width = 256 }
seed = 20261130
dims = { batch = { min = 1, max = 8 } }

[models.policy2.methods.encode_observation]
inputs = [
  { name = "image", shape = ["batch", 3, 96, 96], dtype = "float32" },
  { name = "state", shape = ["batch", 14], dtype = "float32" },
]

[models.policy2.methods.predict_actions]
inputs = [
  { name = "observation", shape = ["batch", 37, 256], dtype = "float32" },
]

[programs.policy2_portable]
model = "policy2"
backend = "portable"
data_name = "policy2_portable_weights"
"""


def run(command: list[str | Path], *, check: bool = True) -> tuple[float, subprocess.CompletedProcess]:
    """Run ``command`` in the repository; return (seconds, completed process). Fails loudly on error."""
    start = time.perf_counter()
    done = subprocess.run([str(c) for c in command], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if check and done.returncode != 0:
        sys.exit(f"bench: {' '.join(map(str, command))} exited {done.returncode}:\n{done.stderr.strip()}")
    return seconds, done


def build(manifest: Path, cache: Path, out: Path, jobs: int, *extra: str) -> tuple[float, subprocess.CompletedProcess]:
    return run([PTEBUILD, "build", manifest, "--cache", cache, "--out", out, "--jobs", str(jobs), *extra])


def statuses(done: subprocess.CompletedProcess) -> dict[str, str]:
    return {p["name"]: p["status"] for p in json.loads(done.stdout)["targets"]}


def code_fingerprint() -> str:
    """A digest of all of ptebuild's code: action keys cover its lowering code, so an edit to it
    during the bench turns no-op builds into rebuilds and makes the figures meaningless."""
    from ptebuild import own_code

    return own_code.digest(own_code.files())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="no-op runs (each paired with python -c pass)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="ptebuild build --jobs")
    args = parser.parse_args()
    if args.runs < 7:
        parser.error("--runs must be at least 7")
    manifest = ROOT / "manifests" / "robot.toml"
    fingerprint = code_fingerprint()

    with tempfile.TemporaryDirectory(prefix="ptebuild-bench-") as tmp:
        tmp = Path(tmp)
        cache, out = tmp / "cache", tmp / "out"
        print(f"ptebuild {PTEBUILD}, python {PYTHON}, {os.cpu_count()} cores, --jobs {args.jobs}", flush=True)

        cold, _ = build(manifest, cache, out, args.jobs, "--json")
        print(f"cold build done in {cold:.1f} s", flush=True)

        # The first no-op may still write state (plan cache, stat cache); it is not timed.
        _, first = build(manifest, cache, out, args.jobs, "--json")
        noop_status = statuses(first)
        noop_ms, python_ms, not_noop = [], [], 0
        for i in range(args.runs):
            # Alternate who goes first so neither always runs on a warmer machine. --json costs
            # nothing measurable and lets each timed run prove it really had nothing to do.
            pair = [("noop", [PTEBUILD, "build", manifest, "--cache", cache, "--out", out,
                              "--jobs", str(args.jobs), "--json"]),
                    ("python", [PYTHON, "-c", "pass"])]
            for name, command in pair if i % 2 == 0 else reversed(pair):
                seconds, done = run(command)
                if name == "noop":
                    noop_ms.append(seconds * 1000)
                    not_noop += any(v != "cached" for v in statuses(done).values())
                else:
                    python_ms.append(seconds * 1000)
        noop, python = statistics.median(noop_ms), statistics.median(python_ms)
        print(f"no-op runs done ({args.runs} pairs)", flush=True)

        # One model changed: a copied manifest folder with a second model and its program.
        folder = tmp / "manifests"
        shutil.copytree(ROOT / "manifests", folder, ignore=shutil.ignore_patterns("__pycache__"))
        models2 = folder / "models2"
        models2.mkdir()
        (models2 / "__init__.py").write_text('"""A copy of models/ for bench_build.py."""\n')
        shutil.copy2(folder / "models" / "robot_policy.py", models2 / "robot_policy.py")
        copied = folder / "robot.toml"
        copied.write_text(copied.read_text() + SECOND_MODEL)
        out2 = tmp / "out2"
        first2, done = build(copied, cache, out2, args.jobs, "--json")
        before = statuses(done)
        print(f"two-model build done in {first2:.1f} s: {before}", flush=True)
        source = models2 / "robot_policy.py"
        with open(source, "a") as handle:
            handle.write("# one byte of difference for bench_build.py\n")
        changed, done = build(copied, cache, out2, args.jobs, "--json")
        after = statuses(done)

    disturbed = code_fingerprint() != fingerprint
    diff = noop - python
    ratio = cold * 1000 / noop
    rebuilt = sorted(name for name, status in after.items() if status == "built")
    restored = sorted(name for name, status in after.items() if status == "cached")
    only_policy2 = rebuilt == ["policy2_portable"] and len(restored) == len(after) - 1

    def verdict(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    rows = [
        ("cold build (1 run)", f"{cold:8.2f} s", ""),
        (f"no-op build (median of {args.runs})", f"{noop:8.1f} ms",
         f"first no-op: {sorted(set(noop_status.values()))}; timed runs that rebuilt: {not_noop}; "
         f"min {min(noop_ms):.1f}, max {max(noop_ms):.1f}"),
        (f"python -c pass (median of {args.runs})", f"{python:8.1f} ms", f"min {min(python_ms):.1f}, max {max(python_ms):.1f}"),
        ("no-op - python start-up", f"{diff:8.1f} ms", f"target <= {NOOP_LIMIT_MS:.0f} ms: {verdict(diff <= NOOP_LIMIT_MS)}"),
        ("cold / no-op", f"{ratio:8.0f} x", f"target >= {RATIO_TARGET:.0f}x: {verdict(ratio >= RATIO_TARGET)}"),
        ("copied manifest + policy2, first build", f"{first2:8.2f} s",
         ", ".join(f"{k} {v}" for k, v in sorted(before.items()))),
        ("after editing models2/robot_policy.py", f"{changed:8.2f} s",
         f"built {rebuilt}, cached {restored}: {verdict(only_policy2)}"),
    ]
    width = max(len(r[0]) for r in rows)
    print()
    for label, figure, note in rows:
        print(f"{label.ljust(width)}  {figure}  {note}".rstrip())
    if disturbed:
        print("warning: ptebuild/builder or ptebuild/backends changed while the bench ran; "
              "cached keys were invalidated, so these figures do not measure ptebuild. Run it again.")
    return 0 if only_policy2 and not not_noop and not disturbed else 1


if __name__ == "__main__":
    sys.exit(main())
