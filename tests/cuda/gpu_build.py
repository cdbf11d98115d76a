"""Build CUDA programs on the GPU machine: through ``ptebuild build --json``, or directly.

``build_direct`` runs the same steps as a worker (model, lowering, check) in this process
without the build loop or the cache: the GPU tests and ``make_data.py`` use it so they do not
depend on the builder's scheduling, and ``build_cli`` when the whole command is what is tested.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def build_cli(manifest: Path, out: Path, cache: Path | None, *extra: str, env: dict | None = None) -> dict:
    """``ptebuild build MANIFEST --out OUT --json`` in a new process (``env``: more variables);
    returns the report and timing."""
    command = [sys.executable, "-m", "ptebuild", "build", str(manifest), "--out", str(out), "--json", "--jobs", "1"]
    command += ["--cache", str(cache)] if cache else ["--no-cache"]
    command += list(extra)
    env = dict(os.environ, **(env or {}), PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
    seconds = time.monotonic() - started
    try:
        report = json.loads(done.stdout)
    except ValueError:
        report = {"stdout": done.stdout[-4000:]}
    return {"rc": done.returncode, "seconds": seconds, "report": report, "stderr": done.stderr[-4000:]}


def build_direct(manifest: Path, out: Path, only: list[str] | None = None) -> dict:
    """Lower and check each (chosen) program of ``manifest`` in this process; files into ``out``."""
    from ptebuild.backends import get_backend
    from ptebuild.lowering.examples import make_inputs
    from ptebuild.manifest import load_manifest
    from ptebuild.models.factory.loading import build_model
    from ptebuild.models.factory.lower import lower

    plan = load_manifest(manifest)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for program in plan.programs:
        if only and program.name not in only:
            continue
        started = time.monotonic()
        model = build_model(program, Path(plan.manifest_dir), plan.manifest)
        inputs = {m.name: make_inputs(m, program.seed) for m in program.methods}
        staging = out / f".staging-{program.name}"
        lowered = lower(model, program, inputs, staging, lambda text: None)
        lowered_at = time.monotonic()
        ptd = lowered.files.get(program.ptd_name) if program.ptd_name else None
        figures, check_name = get_backend(program.backend).check(model, program, lowered.files[program.pte_name], ptd)
        files = {}
        for name, path in lowered.files.items():
            shutil.copyfile(path, out / name)  # a link into the staging folder's store: its bytes
            files[name] = {"sha256": sha256(out / name), "size": (out / name).stat().st_size}
        shutil.rmtree(staging, ignore_errors=True)
        results[program.name] = {
            "files": files,
            "check": check_name,
            "figures": [f.to_json() for f in figures],
            "lower_seconds": lowered_at - started,
            "check_seconds": time.monotonic() - lowered_at,
        }
    return results
