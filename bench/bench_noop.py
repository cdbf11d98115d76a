"""Benchmark (not a test): no-op builds against Python start-up, side by side, as ratios.

Run: ``.venv/bin/python bench/bench_noop.py [--runs N]``. Two manifests, each copied into a fresh
temporary folder and built once cold into a fresh cache and output folder, then timed with
nothing to do, each kind of no-op in its own series interleaved with ``python -c pass`` on the
same interpreter (the machine is shared and noisy: only the ratio of medians taken side by side
means anything):

* ``stamped``: the no-op stamp (:mod:`ptebuild.builder.noop`) answers from the stats of what the
  last no-op looked at: what a repeated build costs;
* ``touched``: the full no-op path as the issue names it, taken whenever a stat changed but not
  the bytes: before each run the manifest is touched and the model's sources are written anew
  with their own bytes (a new inode and new times, as ``git checkout`` writes a file), less than
  half a second before the build. The stamp checks what moved by content, replays, and takes the
  new stats;
* ``no stamp``: the stamp removed before each run: the build machinery decides that everything is
  up to date, and writes the stamp (what the first no-op after a real build costs). Printed, not
  held to a target.

Targets: ``manifests/robot.toml`` (3 programs) stamped <= 1.5x Python start-up, touched (the full
path) <= 2x (issue 43); a
generated manifest of 50 programs (25 variants of the tiny test model, portable and XNNPACK,
checks off to keep the cold build short) stamped and touched <= 4x, so that the cost of a no-op
does not grow much with the number of programs.

Every timed run must report each program ``cached`` (``--json``); ``-X importtime`` checks once
per manifest and kind that torch, executorch and pydantic are not imported. Takes 5 to 7
minutes on 2 cores, most of it the two cold builds (about 1.5 and 3 minutes).
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
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"
PYTHON = BIN / "python" if (BIN / "python").exists() else Path(sys.executable)
PTEBUILD = BIN / "ptebuild" if (BIN / "ptebuild").exists() else Path(sys.executable).with_name("ptebuild")
TINY = ROOT / "tests" / "manifests"
HEAVY = ("torch", "executorch", "pydantic")
KINDS = ("stamped", "touched", "no stamp")
TARGETS = {"robot": {"stamped": 1.5, "touched": 2.0}, "fifty": {"stamped": 4.0, "touched": 4.0}}
RACY_S = 0.6  # the stamp trusts no stat taken within half a second of its file's change


def robot(folder: Path) -> tuple[Path, list[Path]]:
    """``manifests/robot.toml`` and its model package, copied (they are touched while timing)."""
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "manifests" / "robot.toml", folder / "robot.toml")
    shutil.copytree(ROOT / "manifests" / "models", folder / "models", ignore=shutil.ignore_patterns("__pycache__"))
    return folder / "robot.toml", sorted((folder / "models").rglob("*.py"))


def fifty_programs(folder: Path) -> tuple[Path, list[Path]]:
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
    return manifest, sorted((folder / "tinymodels").rglob("*.py"))


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


def rebuilt(done: subprocess.CompletedProcess) -> bool:
    """True if the run reported any program other than ``cached``."""
    return any(p["status"] != "cached" for p in json.loads(done.stdout)["targets"])


def heavy_imports(done: subprocess.CompletedProcess) -> list[str]:
    """The heavy packages that ``-X importtime`` saw imported."""
    tops = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines() if line.startswith("import time:")}
    return sorted(tops & set(HEAVY))


def same_bytes_anew(path: Path) -> None:
    """Write ``path`` again with its own bytes through a new file (a new inode, new times)."""
    fresh = path.with_name(path.name + ".bench-new")
    fresh.write_bytes(path.read_bytes())
    os.replace(fresh, path)


def measure(name: str, manifest: Path, sources: list[Path], tmp: Path, runs: int) -> dict:
    cache, out = tmp / f"cache-{name}", tmp / f"out-{name}"
    build = [PTEBUILD, "build", manifest, "--cache", cache, "--out", out, "--json"]
    cold, done = run(build)
    programs = len(json.loads(done.stdout)["targets"])
    print(f"{name}: cold build of {programs} programs in {cold:.1f} s", flush=True)
    time.sleep(RACY_S)  # outputs written just now are not trusted by the stamp
    run(build)  # the first no-op writes state (plan cache, stat cache, the no-op stamp)

    def touch() -> None:
        os.utime(manifest)
        for source in sources:
            same_bytes_anew(source)

    def drop_stamp() -> None:
        shutil.rmtree(cache / "noop", ignore_errors=True)

    before: dict[str, Callable[[], None]] = {"stamped": lambda: None, "touched": touch, "no stamp": drop_stamp}
    row: dict = {"name": name, "programs": programs, "cold": cold, "rebuilt": 0, "heavy": set()}
    for kind in KINDS:
        time.sleep(RACY_S)
        if kind == "stamped":
            run(build)  # a replay after the stats aged: the stamp takes them, and they alone answer
            time.sleep(RACY_S)
        before[kind]()
        _, traced = run([PYTHON, "-X", "importtime", "-m", "ptebuild", *build[1:]])
        row["heavy"] |= {f"{h} ({kind})" for h in heavy_imports(traced)}
        row["rebuilt"] += rebuilt(traced)
        noop_ms, python_ms = [], []
        for i in range(runs):
            pair = [("noop", build), ("python", [PYTHON, "-c", "pass"])]
            for what, command in pair if i % 2 == 0 else reversed(pair):
                if what == "noop":
                    before[kind]()
                seconds, done = run(command)
                if what == "noop":
                    noop_ms.append(seconds * 1000)
                    row["rebuilt"] += rebuilt(done)
                else:
                    python_ms.append(seconds * 1000)
        row[kind] = (statistics.median(noop_ms), statistics.median(python_ms))
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="runs per manifest and kind of no-op, each paired with python -c pass")
    args = parser.parse_args()
    print(f"ptebuild {PTEBUILD}, python {PYTHON}, {os.cpu_count()} cores, {args.runs} runs of each", flush=True)
    with tempfile.TemporaryDirectory(prefix="ptebuild-bench-noop-") as tmp:
        tmp = Path(tmp)
        rows = [
            measure("robot", *robot(tmp / "robot"), tmp, args.runs),
            measure("fifty", *fifty_programs(tmp / "fifty"), tmp, args.runs),
        ]
    print()
    ok = True
    for r in rows:
        good = not r["rebuilt"] and not r["heavy"]
        ok &= good
        print(f"{r['name']:6} {r['programs']:3} programs: timed runs that rebuilt: {r['rebuilt']}; "
              f"heavy imports: {', '.join(sorted(r['heavy'])) or 'none'}")
        for kind in KINDS:
            noop, python = r[kind]
            ratio = noop / python
            target = TARGETS[r["name"]].get(kind)
            verdict = "not a target"
            if target is not None:
                verdict = f"target <= {target:g}x: {'ok' if ratio <= target else 'MISSED'}"
                ok &= ratio <= target
            print(f"{'':6} {kind:>9}: median {noop:7.1f} ms, python -c pass {python:6.1f} ms -> {ratio:.2f}x ({verdict})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
