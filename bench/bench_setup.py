"""Benchmark (not a test): set-up on a fresh clone with uv against plain pip, side by side.

Run: ``.venv/bin/python bench/bench_setup.py [--runs 3] [--cache cold|warm|both] [--build] [--ci]
[--bytecode uncached|cached] [--installers both|uv]`` (under ``flock /work/wt/heavy.lock`` on a
shared machine). Each run clones this repository's HEAD
(``git clone``: committed work only, nothing installed) once per installer and times, in each
clone, one step after the other:

* ``set-up``: ``./bootstrap.sh`` from nothing (no ``.venv``): README command 1 less its build;
* ``build`` (``--build``): then ``.venv/bin/ptebuild build manifests/robot.toml`` into a fresh
  cache folder of its own (the capability probe included, as on a fresh machine): ``set-up`` plus
  ``build`` is README command 1;
* ``test set-up``: then ``./bootstrap.sh --test``: the test extras and BuildGrid's venv (the Debian
  packages only where a tool is missing: the header says whether they are);
* ``ci set-up`` (``--ci``): ``./bootstrap.sh --test`` from nothing in another fresh clone, as
  ``.ci/run`` does on CI's fresh machine.

The installers: ``PTEBUILD_INSTALLER=pip`` (``old``: pip, as bootstrap.sh always installed) and
``PTEBUILD_INSTALLER=uv`` (``new``), the two runs of a round back to back, their order alternating
from round to round (the machine is shared: only medians taken side by side mean anything).
``cold``: every run with empty installer caches (``PIP_CACHE_DIR``, ``UV_CACHE_DIR``; uv's own
wheel is fetched too), as on CI's fresh machine; ``warm``: caches that an untimed run filled first.
Each step's CPU seconds (user and system, of everything it ran) are printed beside its wall time:
on a machine that others load, they tell what the step costs where it has the cores to itself.
``--bytecode uncached`` (the default): ``PYTHONDONTWRITEBYTECODE=1``, as on these machines and in
CI, where bootstrap.sh compiles the bytecode after uv; ``cached``: unset, as on most users'
machines, where the first imports compile what they import (the build pays for it: ``--build``).
pip compiles everything either way: ``--installers uv`` leaves its baseline out.

Checked once per installer: both venvs hold the same distributions at the same versions (but for
pip and setuptools: :data:`EXPECTED_DIFFERENCES`), torch is the CPU build that lies on this
machine's disk, and no NVIDIA package came. Targets (issue 27): set-up <= 25 s, command 1
<= 60 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALLERS = ("pip", "uv")
TARGETS = {"set-up": 25.0, "command 1": 60.0}
DISTRIBUTIONS = (
    "import importlib.metadata as m, json; "
    "print(json.dumps({d.metadata['Name'].lower().replace('_', '-'): d.version for d in m.distributions()}))"
)
EXPECTED_DIFFERENCES = {".venv": {"pip"}, ".venv-buildgrid": {"pip", "setuptools"}}
"""pip's venvs keep ensurepip's pip (and setuptools); uv's main venv has constraints.txt's pip, and
BuildGrid's venv neither (nothing there needs them)."""
DEBIAN_TOOLS = ("clang", "lld-link", "llvm-dlltool", "llvm-dlltool-19", "llvm-readobj", "gcc", "git", "x86_64-w64-mingw32-g++")


def timed(command: list, cwd: Path, env: dict) -> tuple[float, float]:
    """Seconds of wall time and of CPU (user and system, of the command and all it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"bench: {' '.join(map(str, command))} in {cwd} exited {done.returncode}:\n{done.stderr.strip()[-3000:]}")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def distributions(python: Path) -> dict[str, str]:
    return json.loads(subprocess.run([str(python), "-c", DISTRIBUTIONS], capture_output=True, text=True, check=True).stdout)


class Bench:
    def __init__(self, tmp: Path, build: bool, ci: bool, bytecode_cached: bool) -> None:
        self.tmp, self.build, self.ci, self.bytecode_cached = tmp, build, ci, bytecode_cached
        self.count = 0
        self.installed: dict[str, dict[str, dict[str, str]]] = {}

    def folder(self, what: str) -> Path:
        self.count += 1
        return self.tmp / f"{what}-{self.count}"

    def run(self, installer: str, warm: Path | None, fill: bool = False) -> dict[str, float]:
        """One run of the steps with ``installer``: seconds per step. ``warm``: the installers'
        caches to use, else empty ones for each clone; ``fill``: the set-ups alone."""
        seconds: dict[str, float] = {}

        def step(name: str, command: list, clone: Path, env: dict) -> None:
            seconds[name], seconds[f"{name} (cpu)"] = timed(command, clone, env)

        with self.clone(installer, warm) as (clone, env):
            step("set-up", ["./bootstrap.sh"], clone, env)
            if self.build and not fill:
                step("build", [clone / ".venv/bin/ptebuild", "build", "manifests/robot.toml",
                               "--cache", self.folder("cache"), "--out", self.folder("out")], clone, env)
                seconds["command 1"] = seconds["set-up"] + seconds["build"]
            step("test set-up", ["./bootstrap.sh", "--test"], clone, env)
            if installer not in self.installed:
                self.installed[installer] = {venv: distributions(clone / venv / "bin" / "python") for venv in (".venv", ".venv-buildgrid")}
        if self.ci and not fill:
            with self.clone(installer, warm) as (clone, env):
                step("ci set-up", ["./bootstrap.sh", "--test"], clone, env)
        return seconds

    @contextlib.contextmanager
    def clone(self, installer: str, warm: Path | None) -> Iterator[tuple[Path, dict]]:
        """A fresh clone of HEAD, and the environment to set it up in (removed after, with the
        empty caches made for it)."""
        clone, caches = self.folder("clone"), warm or self.folder("caches")
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        if not self.bytecode_cached:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.update(PTEBUILD_INSTALLER=installer, PIP_CACHE_DIR=str(caches / "pip"), UV_CACHE_DIR=str(caches / "uv"))
        try:
            yield clone, env
        finally:
            shutil.rmtree(clone, ignore_errors=True)
            if warm is None:
                shutil.rmtree(caches, ignore_errors=True)


def check_installed(installed: dict[str, dict[str, dict[str, str]]]) -> bool:
    ok = True
    for venv in (".venv", ".venv-buildgrid"):
        old, new = installed["pip"][venv], installed["uv"][venv]
        differ = sorted(name for name in old.keys() | new.keys() if old.get(name) != new.get(name))
        unexpected = [name for name in differ if name not in EXPECTED_DIFFERENCES[venv]]
        ok &= not unexpected
        described = ", ".join(f"{n} {old.get(n, '-')} (pip) / {new.get(n, '-')} (uv)" for n in differ) or "none"
        print(f"{venv}: {len(new)} distributions; differing: {described}{' UNEXPECTED' if unexpected else ''}")
    for installer in INSTALLERS:
        main = installed[installer][".venv"]
        nvidia = sorted(name for name in main if name.startswith("nvidia-"))
        ok &= main.get("torch") == "2.13.0+cpu" and not nvidia
        print(f"{installer}: torch {main.get('torch')}, NVIDIA packages: {', '.join(nvidia) or 'none'}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each installer per cache state")
    parser.add_argument("--cache", choices=("cold", "warm", "both"), default="both")
    parser.add_argument("--build", action="store_true", help="also README command 1's build (about a minute a run)")
    parser.add_argument("--ci", action="store_true", help="also ./bootstrap.sh --test from nothing, as CI runs it")
    parser.add_argument("--bytecode", choices=("uncached", "cached"), default="uncached",
                        help="uncached: PYTHONDONTWRITEBYTECODE=1, as on these machines and in CI (bootstrap.sh compiles ahead); "
                             "cached: unset, as on most users' machines (the first imports compile)")
    parser.add_argument("--installers", choices=("both", "uv"), default="both",
                        help="uv: no pip baseline (its figures do not depend on --bytecode: pip always compiles)")
    args = parser.parse_args()
    missing = [tool for tool in DEBIAN_TOOLS if not shutil.which(tool)]
    uv_on_path = shutil.which("uv")
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; Debian tools missing: {', '.join(missing) or 'none'} "
          f"(--test installs them{' in the first run' if missing else ': not timed here'}); uv on PATH: {uv_on_path or 'none'}", flush=True)
    ok = True
    states = ("cold", "warm") if args.cache == "both" else (args.cache,)
    installers = INSTALLERS if args.installers == "both" else ("uv",)
    with tempfile.TemporaryDirectory(prefix="ptebuild-bench-setup-") as tmp:
        bench = Bench(Path(tmp), args.build, args.ci, args.bytecode == "cached")
        for state in states:
            caches: dict[str, Path | None] = dict.fromkeys(installers)
            if state == "warm":
                for installer in installers:
                    caches[installer] = bench.folder(f"caches-{installer}")
                    bench.run(installer, caches[installer], fill=True)  # untimed: fills the caches
            times: dict[str, dict[str, list[float]]] = {installer: {} for installer in installers}
            for i in range(args.runs):
                for installer in installers if i % 2 == 0 else reversed(installers):
                    for step, seconds in bench.run(installer, caches[installer]).items():
                        times[installer].setdefault(step, []).append(seconds)
                    print(f"{state} run {i + 1} {installer}: "
                          + ", ".join(f"{step} {s[-1]:.1f} s" for step, s in times[installer].items()), flush=True)
            print(f"\n{state} caches, medians of {args.runs} (load average now {os.getloadavg()[0]:.1f}):")
            for step, new_times in times["uv"].items():
                new = statistics.median(new_times)
                target = TARGETS.get(step)
                verdict = ""
                if target is not None:
                    verdict = f"; target <= {target:.0f} s: {'ok' if new <= target else 'MISSED'}"
                    ok &= new <= target
                if "pip" not in times:
                    print(f"  {step:>17}: uv {new:6.1f} s{verdict}")
                    continue
                old = statistics.median(times["pip"][step])
                print(f"  {step:>17}: pip {old:6.1f} s, uv {new:6.1f} s -> {new / old:.2f}x the time ({old / new:.1f}x faster){verdict}")
            print()
        if len(installers) == 2:
            ok &= check_installed(bench.installed)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
