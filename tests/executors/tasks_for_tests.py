"""Tasks for a copy of the tiny project, made the way the builder makes them (no builder needed)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from ptebuild.builder import keys
from ptebuild.hashing import hash_file
from ptebuild.manifest import load_manifest
from ptebuild.worker.tasks import Event, EventKind, Task, TaskFile


def make_tasks(manifest: Path, store: Path | None, resources: dict | None = None) -> dict[str, Task]:
    """One task per program of ``manifest``, writing its outputs into the store (a CAS folder)
    ``store`` (None: ``<manifest folder>/store``)."""
    plan = load_manifest(str(manifest))
    store = store if store is not None else manifest.parent / "store"
    tasks = {}
    for program in plan.programs:
        inputs = keys.program_inputs(program, plan, hash_file)
        files = [
            TaskFile(name, hashlib.sha256(path.read_bytes()).hexdigest())
            for name, path in sorted(keys.model_sources(program, Path(plan.manifest_dir), plan.manifest).items())
        ]
        if program.weights:
            files.append(TaskFile(program.weights, hash_file(Path(plan.manifest_dir, program.weights))[0]))
        tasks[program.name] = Task(
            task_id=program.name,
            key=keys.action_key(inputs),
            plan=program,
            manifest=str(manifest),
            manifest_dir=plan.manifest_dir,
            store=str(store),
            files=tuple(files),
            resources=dict(resources or {}),
            inputs=inputs,
        )
    return tasks


def stored(task: Task, output) -> Path:
    """Where an output of ``task`` is in its store (its blob)."""
    from ptebuild.store.cas import CAS

    return CAS(Path(task.store)).path(output.sha256)


def run_all(executor, tasks, timeout: float = 240.0, on_event=None) -> dict[str, Event]:
    """Submit ``tasks`` as capacity allows; return each task's final event. Fails on timeout."""
    todo = list(tasks.values())
    final: dict[str, Event] = {}
    deadline = time.monotonic() + timeout
    while len(final) < len(tasks):
        assert time.monotonic() < deadline, f"no result in {timeout}s; finished: {sorted(final)}"
        while todo and executor.capacity() > 0:
            executor.submit(todo.pop(0))
        for event in executor.poll(0.2):
            if on_event is not None:
                on_event(event)
            if event.kind in (EventKind.DONE, EventKind.FAILED):
                final[event.task_id] = event
    return final


def slow_on_first_attempt(manifest: Path, marker: Path, seconds: float = 60.0) -> None:
    """Make the tiny model's factory write ``marker`` and sleep on its first call, and build at
    once on later calls: a task is then surely running while the test kills something."""
    model = manifest.parent / "tinymodels" / "tiny.py"
    text = model.read_text()
    old = "def make_tiny(**kwargs) -> Tiny:\n    return Tiny(**kwargs)\n"
    assert old in text
    model.write_text(text.replace(old, (
        "def make_tiny(**kwargs) -> Tiny:\n"
        "    import os, time\n"
        f"    marker = {str(marker)!r}\n"
        "    if not os.path.exists(marker):\n"
        "        with open(marker, 'w') as f:\n"
        "            f.write(str(os.getpid()))\n"
        f"        time.sleep({seconds})\n"
        "    return Tiny(**kwargs)\n"
    )))


def wait_for(condition, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(interval)


ROOT = Path(__file__).resolve().parents[2]


def cli_build(manifest: Path, out: Path, *args: str, env: dict | None = None, timeout: float = 300) -> dict[str, str]:
    """``ptebuild build`` in a new process; returns the SHA-256 of each output file."""
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "ptebuild", "build", str(manifest), "--out", str(out), *args],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT, env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.pt[ed]"))}


def local_reference(base: Path) -> tuple[Path, dict[str, str]]:
    """The tiny project built by the local executor, once per test session (in ``base``)."""
    from project_copy import copy_project

    folder = base / "local-reference"
    manifest = folder / "project" / "tiny.toml"
    if not (folder / "done").exists():
        copy_project(folder / "project")
        cli_build(manifest, folder / "out", "--executor", "local", "--no-cache")
        (folder / "done").touch()
    return manifest, {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((folder / "out").glob("*.pt[ed]"))}
