"""Build a plan: restore what the cache already has, lower the rest in workers, publish atomically.

For each program the builder computes its action key (:mod:`ptebuild.builder.keys`). A key the
store knows is restored from the CAS (outputs already in place are kept untouched); a new key is
lowered in a worker process while this process holds the key's lock, so that concurrent ptebuild
processes sharing one cache lower each program once. Files are staged in a hidden folder inside
the output folder and renamed into place only after the program is checked: a failed or
interrupted build never leaves a half-written file and never replaces the last good one.

This module imports neither torch nor executorch: a build whose programs are all cached never
pays for them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ptebuild.builder import keys
from ptebuild.runtime.record import RECORD_NAME, read_build_record, update_record, write_atomically
from ptebuild.errors import CorruptObject, DataNameError, FormatError, StoreError
from ptebuild.manifest.plan import BuildPlan, ProgramPlan, ShimPlan
from ptebuild.names import case_key

STAGING_DIR = ".ptebuild-staging"
LOCK_RETRY_SECONDS = 0.25
HEARTBEAT_SECONDS = 15.0
"""A program that has said nothing for this long gets a "still ..." line: long work shows life."""


@dataclass
class TargetResult:
    """What happened to one program or shim library."""

    name: str
    kind: str  # "program" or "shims"
    backend: str | None
    status: str = "pending"  # "built", "cached", "failed" or "skipped"
    seconds: float = 0.0
    outputs: list[dict] = field(default_factory=list)
    figures: list[dict] = field(default_factory=list)
    methods: list[dict] = field(default_factory=list)
    message: str = ""
    explain: list[str] = field(default_factory=list)
    failure_kind: str = "build"
    key: str = ""

    def to_json(self) -> dict:
        data = {
            "name": self.name,
            "kind": self.kind,
            "backend": self.backend,
            "status": self.status,
            "seconds": round(self.seconds, 3),
            "methods": self.methods,
            "outputs": self.outputs,
            "check": self.figures,
            "key": self.key,
        }
        if self.message:
            data["error"] = self.message
        if self.explain:
            data["explain"] = self.explain
        return data


@dataclass
class BuildOptions:
    out_dir: Path | None = None
    store: object | None = None
    """A :class:`ptebuild.store.Store`, or None to build without caching."""
    jobs: int = 1
    keep_going: bool = False
    explain: bool = False
    debug: bool = False


Report = Callable[[str, str, str], None]
"""(target name, event, text): "start", "progress", "warning", "done" events for the CLI."""


def _method_specs(program: ProgramPlan) -> list[dict]:
    return [
        {
            "name": m.name,
            "inputs": [{"name": i.name, "shape": list(i.shape), "dtype": i.dtype} for i in m.inputs],
            "dims": [{"name": d.name, "min": d.min, "max": d.max} for d in m.dims],
        }
        for m in program.methods
    ]


def manifest_id(plan: BuildPlan, out_dir: Path) -> str:
    """How the build record names a manifest: its path relative to the output folder, so that a
    checkout moved as a whole keeps its identity."""
    manifest = Path(plan.manifest_dir, Path(plan.manifest).name)
    return Path(os.path.relpath(manifest, out_dir.resolve())).as_posix()


def check_output_folder(plan: BuildPlan, out_dir: Path) -> None:
    """Refuse to write over what another manifest built into the output folder, and any output
    whose name equals, but for case, a file already there."""
    try:
        existing = {case_key(name): name for name in os.listdir(out_dir)}
    except FileNotFoundError:
        return
    try:
        record = read_build_record(out_dir)
    except FormatError:
        record = None  # rewritten by this build
    this_manifest = manifest_id(plan, out_dir)
    owners = {}
    if record is not None:
        for owner, entry in record.targets.items():
            for file_name in entry["outputs"]:
                owners[file_name] = (owner, entry.get("manifest"))
    for target in list(plan.programs) + list(plan.shims):
        kind = "program" if isinstance(target, ProgramPlan) else "shim library"
        for name in target.output_names:
            other = existing.get(case_key(name))
            if other is not None and other != name:
                raise DataNameError(
                    f"{plan.manifest}: {kind} {target.name!r} writes {name!r}, but {out_dir} already has "
                    f"{other!r}, one file on macOS and Windows; choose names that differ in more than "
                    f"case, or remove {other!r}"
                )
            owner, owner_manifest = owners.get(name, (None, None))
            if other == name and owner is not None and owner_manifest not in (None, this_manifest):
                raise DataNameError(
                    f"{plan.manifest}: {kind} {target.name!r} writes {name!r}, but {out_dir} has the "
                    f"{name!r} that {owner!r} of {owner_manifest} built (per {RECORD_NAME}); give one of "
                    f"them another name or output folder, or delete {name!r}"
                )


class Builder:
    def __init__(self, plan: BuildPlan, options: BuildOptions, report: Report):
        self.plan = plan
        self.options = options
        self.report = report
        self.out_dir = options.out_dir or plan.out_dir()
        self.store = options.store
        self._warned_store = False
        self.results: dict[str, TargetResult] = {}
        self.record_entries: dict[str, dict] = {}
        self._staging: Path | None = None

    # -- the cache, which may turn itself off ------------------------------------------------

    def _store_failed(self, exc: StoreError) -> None:
        if not self._warned_store:
            self.report("", "warning", f"cache disabled for this build: {exc}")
            self._warned_store = True
        self.store = None

    def digest_file(self, path: Path) -> tuple[str, int]:
        if self.store is not None:
            try:
                return self.store.digest_file(path)
            except StoreError as exc:
                self._store_failed(exc)
        from ptebuild.store.hashing import hash_file

        return hash_file(path)

    def _in_place(self, name: str, info: dict) -> bool:
        """True if the output folder already has ``name`` with the recorded bytes (stat-cached)."""
        path = self.out_dir / name
        try:
            return path.stat().st_size == info["bytes"] and self.digest_file(path)[0] == info["sha256"]
        except OSError:
            return False

    def _restore(self, result: TargetResult, record: dict) -> bool:
        """Put a cached record's outputs in place; False if a blob is corrupt or missing.

        Outputs not already in place are restored into the staging folder first and published
        together, so a corrupt blob never leaves a program half restored.
        """
        outputs = record.get("outputs")
        if not isinstance(outputs, dict) or not outputs:
            return False
        try:
            missing = {name: info for name, info in outputs.items() if not self._in_place(name, info)}
        except (KeyError, TypeError):
            return False
        if missing:
            staging = Path(tempfile.mkdtemp(dir=self._staging_root(), prefix=f"{result.name}.restore."))
            try:
                staged = {}
                for name, info in sorted(missing.items()):
                    self.store.cas.restore(info["sha256"], staging / name)
                    staged[name] = staging / name
                self._publish(staged)
            except CorruptObject as exc:
                self.report(result.name, "warning", f"{exc}; rebuilding")
                return False
            except (KeyError, TypeError):
                return False
            except StoreError as exc:
                self._store_failed(exc)
                return False
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        result.status = "cached"
        result.outputs = [
            {"path": str(self.out_dir / name), "sha256": info["sha256"], "bytes": info["bytes"]}
            for name, info in sorted(outputs.items())
        ]
        result.figures = record.get("figures", [])
        result.explain = ["restored from the cache" if missing else "up to date"]
        return True

    def _lookup(self, result: TargetResult) -> bool:
        if self.store is None:
            return False
        try:
            record = self.store.actions.get(result.key)
        except StoreError as exc:
            self._store_failed(exc)
            return False
        if record is None or not self._restore(result, record):
            return False
        try:
            self.store.record_hit()
        except StoreError:
            pass
        return True

    def _restored(self, result: TargetResult, inputs: dict, started: float) -> bool:
        """Key the target by its inputs and restore it from the cache if the key is known."""
        result.key = keys.action_key(inputs)
        if not self._lookup(result):
            return False
        result.seconds = time.monotonic() - started
        self.report(result.name, "done", result.status)
        return True

    def _save(self, result: TargetResult, inputs: dict, files: dict[str, Path], extra: dict) -> None:
        """Move built files into the CAS (if any) and compute their digests."""
        outputs = {}
        for name, path in files.items():
            digest = None
            if self.store is not None:
                try:
                    digest, size = self.store.cas.put_file(path)
                except StoreError as exc:
                    self._store_failed(exc)
            if digest is None:
                digest, size = self.digest_file(path)
            outputs[name] = {"sha256": digest, "bytes": size}
        if self.store is not None:
            record = {"target": result.name, "outputs": outputs, "inputs": inputs, **extra}
            try:
                refs = sorted({info["sha256"] for info in outputs.values()})
                self.store.actions.put(result.key, result.name, record, refs=refs)
                self.store.record_miss()
            except StoreError as exc:
                self._store_failed(exc)
        result.outputs = [
            {"path": str(self.out_dir / name), "sha256": info["sha256"], "bytes": info["bytes"]}
            for name, info in sorted(outputs.items())
        ]
        return outputs

    def _explain_rebuild(self, result: TargetResult, inputs: dict, model: str = "") -> None:
        if not self.options.explain:
            return
        old = None
        if self.store is not None:
            try:
                last = self.store.actions.last_for(result.name)
            except StoreError:
                last = None
            old = last.get("inputs") if isinstance(last, dict) else None
        result.explain = keys.explain_changes(old, inputs, model=model, program=result.name)

    # -- publishing ---------------------------------------------------------------------------

    def _publish(self, files: dict[str, Path]) -> None:
        """Rename staged files into the output folder: each one appears whole or not at all."""
        # The .ptd goes first: until the .pte is renamed too, the old .pte is still in place and
        # the SHA-256 weight keys make it refuse the new .ptd rather than run with wrong weights.
        for name in sorted(files, key=lambda n: n.endswith(".pte")):
            os.replace(files[name], self.out_dir / name)

    # -- shim libraries -----------------------------------------------------------------------

    def build_shims(self, shim: ShimPlan) -> None:
        result = self.results[shim.name]
        started = time.monotonic()
        inputs = keys.shim_inputs(shim, self.plan, self.digest_file)
        if self._restored(result, inputs, started):
            return
        self._explain_rebuild(result, inputs)
        from ptebuild.shims import load_shim_list, write_import_library

        shims = load_shim_list(Path(self.plan.manifest_dir, shim.source))
        data = write_import_library(shims, fmt=shim.format, keep_order=shim.keep_order)
        staging = Path(tempfile.mkdtemp(dir=self._staging_root(), prefix=f"{shim.name}."))
        try:
            staged = staging / shim.lib_name
            write_atomically(staged, data)
            self._save(result, inputs, {shim.lib_name: staged}, {"kind": "shims"})
            self._publish({shim.lib_name: staged})
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        result.status = "built"
        result.seconds = time.monotonic() - started
        self.report(shim.name, "done", result.status)

    def _staging_root(self) -> Path:
        """This process's staging folder: ``<out>/.ptebuild-staging/<pid>-<random>/``.

        Per process, so that builders sharing an output folder never remove each other's work.
        """
        if self._staging is None:
            root = self.out_dir / STAGING_DIR
            root.mkdir(exist_ok=True)
            self._staging = Path(tempfile.mkdtemp(dir=root, prefix=f"{os.getpid()}-"))
        return self._staging

    def _clean_staging(self) -> None:
        """Remove this process's staging folder, those of processes that died, and the root if empty."""
        root = self.out_dir / STAGING_DIR
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
        try:
            leftovers = list(root.iterdir())
        except OSError:
            return
        for folder in leftovers:
            pid = folder.name.split("-", 1)[0]
            if not pid.isdigit() or not _process_alive(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)
        try:
            root.rmdir()
        except OSError:
            pass  # another build is still staging there

    # -- programs -----------------------------------------------------------------------------

    def _try_lock(self, key: str):
        """The key's lock if this process got it, None if another process holds it."""
        if self.store is None:
            return _NoLock()
        import filelock

        try:
            lock = self.store.lock(key)
            lock.acquire(timeout=0)
            return lock
        except filelock.Timeout:
            return None
        except StoreError as exc:
            self._store_failed(exc)
            return _NoLock()

    def build_programs(self, programs: list[ProgramPlan]) -> None:
        todo: deque[tuple[ProgramPlan, dict]] = deque()
        for program in programs:
            result = self.results[program.name]
            started = time.monotonic()
            inputs = keys.program_inputs(program, self.plan, self.digest_file)
            if self._restored(result, inputs, started):
                self._record_program(program, result)
            else:
                todo.append((program, inputs))
        if not todo:
            return
        from ptebuild.builder.pool import WorkerPool

        deferred: list[tuple[float, ProgramPlan, dict]] = []
        running: dict[str, tuple[ProgramPlan, dict, object, Path, float]] = {}
        heartbeat: dict[str, tuple[float, str, float]] = {}  # name -> (started, stage, last report)
        stopping = False
        plan_json = self.plan.to_json()
        with WorkerPool(min(self.options.jobs, len(todo))) as pool:
            while todo or deferred or running:
                now = time.monotonic()
                for item in [d for d in deferred if d[0] <= now]:
                    deferred.remove(item)
                    todo.append(item[1:])
                while todo and not stopping and pool.idle_slots() > 0:
                    program, inputs = todo.popleft()
                    result = self.results[program.name]
                    lock = self._try_lock(result.key)
                    if lock is None:
                        if not any(d[1] is program for d in deferred):
                            self.report(program.name, "progress", "waiting for another ptebuild process")
                        deferred.append((now + LOCK_RETRY_SECONDS, program, inputs))
                        continue
                    # Another process may have built it while we waited for the lock.
                    if self._lookup(result):
                        lock.release()
                        result.seconds = time.monotonic() - now
                        self.report(program.name, "done", result.status)
                        self._record_program(program, result)
                        continue
                    self._explain_rebuild(result, inputs, model=program.model)
                    staging = Path(tempfile.mkdtemp(dir=self._staging_root(), prefix=f"{program.name}."))
                    task = {
                        "plan": plan_json,
                        "manifest": self.plan.manifest,
                        "manifest_dir": self.plan.manifest_dir,
                        "program": program.name,
                        "staging": str(staging),
                        "debug": self.options.debug,
                    }
                    pool.submit(program.name, task)
                    running[program.name] = (program, inputs, lock, staging, time.monotonic())
                    heartbeat[program.name] = (time.monotonic(), "starting a worker", time.monotonic())
                    self.report(program.name, "start", f"lowering for {program.backend}")
                if stopping and not running:
                    break
                for name, (started_at, stage, last) in list(heartbeat.items()):
                    if name in running and now - last >= HEARTBEAT_SECONDS:
                        self.report(name, "progress", f"still {stage} ({now - started_at:.0f}s)")
                        heartbeat[name] = (started_at, stage, now)
                for event in pool.poll(0.2):
                    if event.task_id not in running:
                        continue
                    if event.kind == "progress":
                        started_at = heartbeat.get(event.task_id, (time.monotonic(),))[0]
                        heartbeat[event.task_id] = (started_at, str(event.payload), time.monotonic())
                        self.report(event.task_id, "progress", str(event.payload))
                    elif event.kind in ("done", "failed"):
                        program, inputs, lock, staging, started = running.pop(event.task_id)
                        result = self.results[program.name]
                        try:
                            if event.kind == "done":
                                self._finish(program, result, inputs, event.payload, staging)
                            else:
                                result.status = "failed"
                                result.message = self._located(program, str(event.payload))
                                result.failure_kind = event.failure_kind
                        finally:
                            lock.release()
                            shutil.rmtree(staging, ignore_errors=True)
                        result.seconds = time.monotonic() - started
                        self.report(program.name, "done", result.status)
                        if result.status == "failed" and not self.options.keep_going:
                            stopping = True
                if stopping and not running:
                    break
        for program, _inputs in todo:
            self.results[program.name].status = "skipped"
        for _when, program, _inputs in deferred:
            self.results[program.name].status = "skipped"

    def _located(self, program: ProgramPlan, message: str) -> str:
        """Make sure a failure names the manifest and the program."""
        where = f"programs.{program.name}"
        if message.startswith(where):
            return f"{self.plan.manifest}: {message}"
        if where in message.split(":", 2)[1:2] or message.startswith(self.plan.manifest):
            return message
        return f"{self.plan.manifest}: {where}: {message}"

    def _finish(self, program: ProgramPlan, result: TargetResult, inputs: dict, payload: dict, staging: Path) -> None:
        files = {name: Path(path) for name, path in payload["files"].items()}
        if set(files) != set(program.output_names):
            result.status = "failed"
            result.message = f"programs.{program.name}: the worker produced {sorted(files)}, expected {list(program.output_names)}"
            return
        extra = {
            "kind": "program",
            "backend": program.backend,
            "figures": payload["figures"],
            "delegates": payload["delegates"],
            "lower_seconds": payload["lower_seconds"],
        }
        self._save(result, inputs, files, extra)
        self._publish(files)
        result.status = "built"
        result.figures = payload["figures"]
        self._record_program(program, result)

    def _record_program(self, program: ProgramPlan, result: TargetResult) -> None:
        self.record_entries[program.name] = {
            "kind": "program",
            "manifest": manifest_id(self.plan, self.out_dir),
            "backend": program.backend,
            "key": result.key,
            "data_name": program.data_name,
            "methods": [m.name for m in program.methods],
            "outputs": {
                Path(o["path"]).name: {"sha256": o["sha256"], "bytes": o["bytes"]} for o in result.outputs
            },
        }

    # -- the whole build ----------------------------------------------------------------------

    def run(self) -> list[TargetResult]:
        for program in self.plan.programs:
            self.results[program.name] = TargetResult(
                name=program.name, kind="program", backend=program.backend, methods=_method_specs(program)
            )
        for shim in self.plan.shims:
            self.results[shim.name] = TargetResult(name=shim.name, kind="shims", backend=None)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        check_output_folder(self.plan, self.out_dir)
        try:
            for shim in self.plan.shims:
                self.build_shims(shim)
                self.record_entries[shim.name] = {
                    "kind": "shims",
                    "manifest": manifest_id(self.plan, self.out_dir),
                    "key": self.results[shim.name].key,
                    "outputs": {
                        Path(o["path"]).name: {"sha256": o["sha256"], "bytes": o["bytes"]}
                        for o in self.results[shim.name].outputs
                    },
                }
            self.build_programs(list(self.plan.programs))
        finally:
            self._clean_staging()
            if self.record_entries:
                update_record(self.out_dir, self.plan.manifest, self.record_entries)
            if self.store is not None:
                self.store.close()
        return [self.results[name] for name in self.results]


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _NoLock:
    def release(self) -> None:
        pass


def build(plan: BuildPlan, options: BuildOptions, report: Report | None = None) -> list[TargetResult]:
    """Build every target of ``plan``; return one result per target, in manifest order."""
    return Builder(plan, options, report or (lambda *_: None)).run()
