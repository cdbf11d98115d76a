"""Tasks and events: what the build loop hands an executor, and what comes back.

A :class:`Task` carries everything a lowering needs as data: its own program's plan
(:class:`~ptebuild.plan.ProgramPlan`), its action key and the files its key lists (the model's
sources and weights), each by name and SHA-256, and the content-addressed store its outputs
go into (``store``, the folder of a :class:`~ptebuild.store.cas.CAS`). An executor on the
builder's own machine reads the files where they are (``manifest_dir``) and writes into the
builder's store; one on another machine ships the files by digest, in chunks, and recreates the
folder there (:func:`materialize`), lowers into a store of its own and sends the outputs' blobs to
the builder's by digest: a node needs ptebuild and the toolchain, not the user's checkout, and
nothing is read whole into memory on the way.

A :class:`TaskResult` returns the outputs as digests: each file's name, SHA-256 and size, its
bytes stored in the task's store under that digest. Publishing into the output folder is always
the builder's job, from its store (the bytes verified as they are copied).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptebuild.deps import Dependencies
from ptebuild.figures import CheckFigures
from ptebuild.insight.program import ProgramInsight
from ptebuild.insight.stages import StageSpan
from ptebuild.jsonable import Jsonable
from ptebuild.plan import ProgramPlan
from ptebuild.results import ActionResult, FailureKind, OutputFile

CHUNK = 16 << 20
"""Bytes per chunk where a file travels in pieces (a task's inputs, a result's blobs to Ray)."""


@dataclass(frozen=True)
class TaskFile:
    """A file a task needs: its name relative to the manifest's folder, and its SHA-256."""

    name: str
    sha256: str


@dataclass(frozen=True)
class Task:
    task_id: str
    """Unique within a build: the program's name."""
    key: str
    plan: ProgramPlan
    """The program's own plan (nothing of the other programs)."""
    manifest: str
    """The manifest as the user named it (for messages)."""
    manifest_dir: str
    """The manifest's folder on the builder's machine."""
    store: str
    """The folder of the content-addressed store (:class:`~ptebuild.store.cas.CAS`) the outputs
    are written into: the builder's own (executors on its machine), or a node's (Ray)."""
    files: tuple[TaskFile, ...] = ()
    """The model's sources and weights (the static inputs of the key), relative to manifest_dir."""
    resources: dict[str, Any] = field(default_factory=dict)
    """Resource requests for schedulers (``num_gpus``, ``memory``...), from the backend and manifest."""
    debug: bool = False
    inputs: dict[str, str] = field(default_factory=dict)
    """The breakdown the key was computed from: what a node that stores the result itself needs."""
    node_cache: bool = False
    """The node looks the key up in the shared cache, and stores what it builds there itself
    (an executor whose nodes open their own tiers: ``ray``); the result then names the entry."""
    threads: int = 0
    """torch's intra-op threads for the task (:func:`threads_per_worker`: its share of the cores of
    a machine whose workers run side by side); 0 leaves torch's own count. Not in the key: a
    program's bytes do not depend on it (``ptebuild build --reproduce`` lowers again with other counts)."""

    @property
    def program(self) -> str:
        """The program's name."""
        return self.plan.name

    @property
    def backend(self) -> str:
        return self.plan.backend

    def to_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "key": self.key,
            "plan": self.plan.to_json(),
            "manifest": self.manifest,
            "manifest_dir": self.manifest_dir,
            "store": self.store,
            "files": [[f.name, f.sha256] for f in self.files],
            "resources": dict(self.resources),
            "debug": self.debug,
            "inputs": dict(self.inputs),
            "node_cache": self.node_cache,
            "threads": self.threads,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Task:
        """A task sent as JSON (its program not yet bound to its backend: the worker binds it
        once its module cache is fresh, :func:`ptebuild.worker.execute.run_task`)."""
        return cls(
            task_id=data["task_id"],
            key=data["key"],
            plan=ProgramPlan.from_json(data["plan"]),
            manifest=data["manifest"],
            manifest_dir=data["manifest_dir"],
            store=data["store"],
            files=tuple(TaskFile(n, d) for n, d in data.get("files", ())),
            resources=dict(data.get("resources") or {}),
            debug=bool(data.get("debug")),
            inputs=dict(data.get("inputs") or {}),
            node_cache=bool(data.get("node_cache")),
            threads=int(data.get("threads") or 0),
        )


def threads_per_worker(workers: int, cores: int | None = None, environment: Mapping[str, str] | None = None) -> int:
    """torch's intra-op threads for each of ``workers`` workers side by side on a machine of
    ``cores`` (default: this process's): its share, at least one; 0 (torch's own count) for one
    worker, or where the environment sets the count (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``)."""
    import os

    environment = os.environ if environment is None else environment
    if workers <= 1 or any(environment.get(name) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")):
        return 0
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // workers)


def input_paths(task: Task) -> dict[str, Path]:
    """Where the task's files are on the builder's machine, by SHA-256 (nothing is read: a file
    that changed is found by whoever streams it, :func:`materialize`)."""
    return {f.sha256: Path(task.manifest_dir, f.name) for f in task.files}


def read_chunk(path: Path, offset: int, size: int) -> bytes:
    """At most ``size`` bytes of ``path`` at ``offset`` (fewer at its end, none past it)."""
    with open(path, "rb") as source:
        source.seek(offset)
        return source.read(size)


ReadChunk = Callable[[TaskFile, int, int], bytes]
"""(file, offset, size) -> at most that many bytes of the file as the builder has it (none past its end)."""


def materialize(task: Task, read: ReadChunk, dest: Path, chunk: int = CHUNK) -> Task:
    """Recreate the task's files under ``dest``, each streamed in chunks from ``read`` and hashed
    on the way; return the task pointed there. Raises OSError naming a file whose bytes are not
    those of its digest (it changed on the builder's machine while the build ran)."""
    import hashlib
    import os
    from dataclasses import replace

    for f in task.files:
        path = dest / f.name
        if ".." in Path(f.name).parts or Path(f.name).is_absolute():
            raise ValueError(f"unsafe file name in a task: {f.name!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        with open(path, "wb") as out:
            offset = 0
            while True:
                data = read(f, offset, chunk)
                if not data:
                    break
                digest.update(data)
                out.write(data)
                offset += len(data)
                del data
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != f.sha256:
            raise OSError(f"{f.name} changed while the build was running")
    return replace(task, manifest_dir=str(dest))


@dataclass(frozen=True)
class TaskResult(Jsonable):
    """A finished lowering, by content: its outputs' digests (the bytes are in the task's store).
    As JSON (what a worker sends): its fields by name."""

    outputs: tuple[OutputFile, ...]
    figures: tuple[CheckFigures, ...] = ()
    check: str = ""
    delegates: dict[str, int] = field(default_factory=dict)
    deps: Dependencies = field(default_factory=Dependencies)
    lower_seconds: float = 0.0
    check_seconds: float = 0.0
    node: str = ""
    """Which machine built it (host name), for reports."""
    action: dict[str, Any] | None = None
    """With ``Task.node_cache``: the result as the node found it in the shared cache, or stored it
    there (:meth:`ptebuild.results.ActionResult.to_json`); the builder fetches its blobs from there,
    not from its own store."""
    cached: bool = False
    """The node found ``action`` in the shared cache: nothing was lowered."""
    warnings: tuple[str, ...] = ()
    """What the lowering (weights a backend kept inside the ``.pte``, figures that could not be
    counted) or the node's cache tiers warned about (one line each), for the builder to report."""
    insight: ProgramInsight | None = None
    """What the worker counted in the lowered program (:attr:`ActionResult.insight`)."""
    stages: tuple[StageSpan, ...] = ()
    """The worker's stage spans, relative to the task's start (:attr:`ActionResult.stages`)."""

    def to_action(self, key: str, target: str, backend: str, inputs: dict[str, str]) -> ActionResult:
        """The action result of this lowering of ``target`` (the program) under ``key``."""
        return ActionResult(key=key, target=target, kind="program", outputs=self.outputs, inputs=inputs,
                            deps=self.deps, backend=backend, figures=self.figures, check=self.check,
                            delegates=self.delegates, lower_seconds=self.lower_seconds, built_on=self.node,
                            insight=self.insight, stages=self.stages)


@dataclass(frozen=True)
class TaskFailure:
    """Why a task failed, as a value: the same from every executor and every worker.

    ``manifest`` and ``location`` are the error's own fields (``models.policy.weights``), empty
    when the worker did not know them; :meth:`line` fills in the program's. A MANIFEST failure
    with neither carries a complete line in ``message`` (a manifest error names its place itself).
    """

    kind: FailureKind
    message: str
    manifest: str = ""
    location: str = ""
    detail: str = ""
    """The failure's whole text (traceback, chained causes, a backtrace, logged runtime lines):
    what the builder keeps in the program's log file; empty when there is nothing beyond the line."""
    renames: tuple[tuple[str, str, str], ...] = ()
    """A manifest of a release that passed inputs by position: ``(key, old name, new name)`` of each
    input to rename (:class:`ptebuild.lowering.binding.BoundByPosition`)."""

    def line(self, manifest: str, program: str) -> str:
        """The one-line report: ``manifest: location: message``, the program's by default."""
        if self.kind is FailureKind.MANIFEST and not self.location and not self.manifest:
            return self.message
        from ptebuild.errors import PtebuildError

        return str(PtebuildError(self.message, manifest=self.manifest or manifest,
                                 location=self.location or f"programs.{program}"))

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "message": self.message, "manifest": self.manifest, "location": self.location,
                "detail": self.detail, "renames": [list(r) for r in self.renames]}

    @classmethod
    def from_json(cls, data: Any) -> TaskFailure:
        """A failure sent by a worker; anything malformed is itself a (build) failure, never an exception."""
        if not isinstance(data, dict):
            return cls(FailureKind.BUILD, f"the worker sent a malformed failure: {data!r:.200}")
        try:
            kind = FailureKind(data.get("kind"))
        except ValueError:
            kind = FailureKind.BUILD
        renames = tuple((str(r[0]), str(r[1]), str(r[2])) for r in data.get("renames") or () if isinstance(r, list) and len(r) == 3)
        return cls(kind, str(data.get("message", "")), str(data.get("manifest") or ""), str(data.get("location") or ""),
                   str(data.get("detail") or ""), renames)

    @classmethod
    def from_exception(cls, exc: BaseException, program: str, debug: bool = False) -> TaskFailure:
        """The failure of a task that raised ``exc`` (the worker side of every executor)."""
        from ptebuild.causes import describe
        from ptebuild.errors import CorruptObject, ManifestError, PtebuildError, StaleWorker, StoreError

        where = f"programs.{program}"
        if isinstance(exc, StaleWorker):
            return cls(FailureKind.STALE, exc.message, "", where)
        if isinstance(exc, StoreError) and not isinstance(exc, CorruptObject):
            return cls(FailureKind.STORE, exc.message, "", where)
        cause = describe(exc)
        if isinstance(exc, ManifestError):
            if exc.location:  # found while lowering (an input the function has no parameter for): the builder adds the manifest
                return cls(FailureKind.MANIFEST, exc.message, exc.manifest or "", exc.location, cause.text,
                           getattr(exc, "renames", ()))
            return cls(FailureKind.MANIFEST, str(exc), detail=cause.text)
        if isinstance(exc, PtebuildError):
            return cls(FailureKind.BUILD, exc.said, exc.manifest or "", exc.location or where, cause.text)
        # The line keeps the cause (a C++ exception's first line, a list's items), not the noise.
        message = cause.line + ("\n" + cause.text if debug else "")
        return cls(FailureKind.BUILD, message, "", where, cause.text)


class StagedProgress:
    """A worker's progress lines with the stage each belongs to: called with a line of text, it
    sends ``(text, stage)`` (the :class:`ptebuild.insight.stages.Stage` value the task is in;
    empty: none yet), which executors carry as events to the builder. A task run with a plain
    ``progress(text)`` callable works the same, without stages.

    ``stored``: where an executor carries the news that the task's outputs are in its store
    before its check runs (:meth:`outputs_stored`; the builder may copy them towards the output
    folder meanwhile, and renames them into place only once the task is done)."""

    def __init__(self, send: Callable[[str, str], None],
                 stored: Callable[[tuple[OutputFile, ...]], None] | None = None) -> None:
        self.send = send
        self.stage = ""
        self.stored = stored

    def __call__(self, text: str) -> None:
        self.send(text, self.stage)

    def outputs_stored(self, outputs: tuple[OutputFile, ...]) -> None:
        """Say that ``outputs`` are in the task's store, whole (a task's result still to come)."""
        if self.stored is not None and outputs:
            self.stored(outputs)


def outputs_stored(progress: Callable[[str], None], outputs: tuple[OutputFile, ...]) -> None:
    """:meth:`StagedProgress.outputs_stored` where ``progress`` is one (else nothing)."""
    if isinstance(progress, StagedProgress):
        progress.outputs_stored(outputs)


class EventKind(str, enum.Enum):
    STARTED = "started"
    """The task reached a worker that is ready to run it."""
    PROGRESS = "progress"
    STORED = "stored"
    """The task's outputs (``Event.outputs``) are in its store, before its check: not a result."""
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class Event:
    task_id: str
    kind: EventKind
    text: str = ""
    """Progress text, or the failure's message."""
    result: TaskResult | None = None
    failure: TaskFailure | None = None
    """Why a FAILED task failed."""
    stage: str = ""
    """With progress: the stage the worker is in (a :class:`ptebuild.insight.stages.Stage` value), if it said."""
    outputs: tuple[OutputFile, ...] = ()
    """With STORED: the outputs the task's store holds by now."""

    @classmethod
    def stored(cls, task_id: str, outputs: Any) -> Event | None:
        """A STORED event from outputs sent as JSON (a list of :meth:`OutputFile.to_json`); None
        if they are not that (the news is only a head start: nothing fails for want of it)."""
        try:
            files = tuple(OutputFile.from_json(o) for o in outputs)
        except (KeyError, TypeError, ValueError):
            return None
        return cls(task_id, EventKind.STORED, outputs=files) if files else None

    @classmethod
    def failed(cls, task_id: str, failure: TaskFailure | str) -> Event:
        """A FAILED event; a plain string is a build failure at the program (a crash, a cancel)."""
        if isinstance(failure, str):
            failure = TaskFailure(FailureKind.BUILD, failure)
        return cls(task_id, EventKind.FAILED, failure.message, failure=failure)
