"""Tasks and events: what the build loop hands an executor, and what comes back.

A :class:`Task` carries everything a lowering needs as data: the plan (JSON), the program's
name, its action key and the files its key lists, each by name and SHA-256. An executor on the
builder's own machine reads those files where they are (``manifest_dir``); one on another machine
ships them (:func:`read_bundle`) and recreates the folder there (:func:`materialize`), so a node
needs ptebuild and the toolchain, not the user's checkout.

A :class:`TaskResult` returns the outputs as content: each file's name, SHA-256 and size, with
the bytes either in a staging folder of the builder's machine (``staging``, local executors) or
inline (``data``, executors on other machines). Publishing into the output folder is always the
builder's job, after it checked the digests.
"""

from __future__ import annotations

import enum
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ptebuild.results import ActionResult, Dependencies, FailureKind, OutputFile


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
    program: str
    backend: str
    plan_json: str
    manifest: str
    """The manifest as the user named it (for messages)."""
    manifest_dir: str
    """The manifest's folder on the builder's machine."""
    files: tuple[TaskFile, ...] = ()
    """The model's sources and weights (the static inputs of the key), relative to manifest_dir."""
    staging: str | None = None
    """A folder of the builder's machine to write outputs into; None: return them inline."""
    resources: dict[str, Any] = field(default_factory=dict)
    """Resource requests for schedulers (``num_gpus``, ``memory``...), from the backend and manifest."""
    debug: bool = False
    inputs: dict[str, str] = field(default_factory=dict)
    """The breakdown the key was computed from: what a node that stores the result itself needs."""
    node_cache: bool = False
    """The node looks the key up in the shared cache, and stores what it builds there itself
    (an executor whose nodes open their own tiers: ``ray``); the result then names the entry."""

    def to_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "key": self.key,
            "program": self.program,
            "backend": self.backend,
            "plan_json": self.plan_json,
            "manifest": self.manifest,
            "manifest_dir": self.manifest_dir,
            "files": [[f.name, f.sha256] for f in self.files],
            "staging": self.staging,
            "resources": dict(self.resources),
            "debug": self.debug,
            "inputs": dict(self.inputs),
            "node_cache": self.node_cache,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Task:
        return cls(
            task_id=data["task_id"],
            key=data["key"],
            program=data["program"],
            backend=data["backend"],
            plan_json=data["plan_json"],
            manifest=data["manifest"],
            manifest_dir=data["manifest_dir"],
            files=tuple(TaskFile(n, d) for n, d in data.get("files", ())),
            staging=data.get("staging"),
            resources=dict(data.get("resources") or {}),
            debug=bool(data.get("debug")),
            inputs=dict(data.get("inputs") or {}),
            node_cache=bool(data.get("node_cache")),
        )


def read_bundle(task: Task) -> dict[str, bytes]:
    """The bytes of the task's files keyed by SHA-256, read from ``manifest_dir`` and checked."""
    bundle: dict[str, bytes] = {}
    for f in task.files:
        data = Path(task.manifest_dir, f.name).read_bytes()
        if hashlib.sha256(data).hexdigest() != f.sha256:
            raise OSError(f"{f.name} changed while the build was running")
        bundle[f.sha256] = data
    return bundle


def materialize(task: Task, bundle: dict[str, bytes], dest: Path) -> Task:
    """Recreate the task's files under ``dest`` from ``bundle``; return the task pointed there."""
    from dataclasses import replace

    for f in task.files:
        path = dest / f.name
        if ".." in Path(f.name).parts or Path(f.name).is_absolute():
            raise ValueError(f"unsafe file name in a task: {f.name!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        data = bundle[f.sha256]
        if hashlib.sha256(data).hexdigest() != f.sha256:
            raise ValueError(f"{f.name}: the bundle's bytes do not match their digest")
        path.write_bytes(data)
    return replace(task, manifest_dir=str(dest))


@dataclass(frozen=True)
class TaskResult:
    """A finished lowering, by content."""

    outputs: tuple[OutputFile, ...]
    staging: str | None = None
    """The folder the files are in (local executors), or None when ``data`` holds them."""
    data: dict[str, bytes] | None = None
    figures: tuple[dict[str, Any], ...] = ()
    check: str = ""
    delegates: dict[str, int] = field(default_factory=dict)
    deps: Dependencies = field(default_factory=Dependencies)
    lower_seconds: float = 0.0
    check_seconds: float = 0.0
    node: str = ""
    """Which machine built it (host name), for reports."""
    action: dict[str, Any] | None = None
    """With ``Task.node_cache``: the result as the node found it in the shared cache, or stored it
    there (:meth:`ptebuild.results.ActionResult.to_json`); the builder fetches its files from
    there, and neither ``staging`` nor ``data`` holds them."""
    cached: bool = False
    """The node found ``action`` in the shared cache: nothing was lowered."""
    warnings: tuple[str, ...] = ()
    """What the node's cache tiers warned about (one line each), for the builder to report."""
    insight: dict[str, Any] | None = None
    """What the worker counted in the lowered program (:attr:`ActionResult.insight`)."""
    stages: tuple[dict[str, Any], ...] = ()
    """The worker's stage spans, relative to the task's start (:attr:`ActionResult.stages`)."""

    def to_action(self, key: str, target: str, backend: str, inputs: dict[str, str]) -> ActionResult:
        """The action result of this lowering of ``target`` (the program) under ``key``."""
        return ActionResult(key=key, target=target, kind="program", outputs=self.outputs, inputs=inputs,
                            deps=self.deps, backend=backend, figures=self.figures, check=self.check,
                            delegates=self.delegates, lower_seconds=self.lower_seconds, built_on=self.node,
                            insight=self.insight, stages=self.stages)

    def files_into(self, folder: Path) -> dict[str, Path]:
        """The output files as paths, writing inline data into ``folder`` first."""
        if self.data is None:
            return {o.name: Path(self.staging or folder, o.name) for o in self.outputs}
        folder.mkdir(parents=True, exist_ok=True)
        paths = {}
        for o in self.outputs:
            path = folder / o.name
            with open(path, "wb") as out:
                out.write(self.data[o.name])
                out.flush()
                os.fsync(out.fileno())
            paths[o.name] = path
        return paths


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

    def line(self, manifest: str, program: str) -> str:
        """The one-line report: ``manifest: location: message``, the program's by default."""
        if self.kind is FailureKind.MANIFEST and not self.location and not self.manifest:
            return self.message
        from ptebuild.errors import PtebuildError

        return str(PtebuildError(self.message, manifest=self.manifest or manifest,
                                 location=self.location or f"programs.{program}"))

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.value, "message": self.message, "manifest": self.manifest, "location": self.location,
                "detail": self.detail}

    @classmethod
    def from_json(cls, data: Any) -> TaskFailure:
        """A failure sent by a worker; anything malformed is itself a (build) failure, never an exception."""
        if not isinstance(data, dict):
            return cls(FailureKind.BUILD, f"the worker sent a malformed failure: {data!r:.200}")
        try:
            kind = FailureKind(data.get("kind"))
        except ValueError:
            kind = FailureKind.BUILD
        return cls(kind, str(data.get("message", "")), str(data.get("manifest") or ""), str(data.get("location") or ""),
                   str(data.get("detail") or ""))

    @classmethod
    def from_exception(cls, exc: BaseException, program: str, debug: bool = False) -> TaskFailure:
        """The failure of a task that raised ``exc`` (the worker side of every executor)."""
        from ptebuild.causes import describe
        from ptebuild.errors import ManifestError, PtebuildError, StaleWorker

        where = f"programs.{program}"
        if isinstance(exc, StaleWorker):
            return cls(FailureKind.STALE, exc.message, "", where)
        cause = describe(exc)
        if isinstance(exc, ManifestError):
            return cls(FailureKind.MANIFEST, str(exc), detail=cause.text)
        if isinstance(exc, PtebuildError):
            return cls(FailureKind.BUILD, exc.message, exc.manifest or "", exc.location or where, cause.text)
        # The line keeps the cause (a C++ exception's first line, a list's items), not the noise.
        message = cause.line + ("\n" + cause.text if debug else "")
        return cls(FailureKind.BUILD, message, "", where, cause.text)


class Progress(Protocol):
    """How a worker says what it is doing: a line of text, and the stage it is in
    (:class:`ptebuild.insight.stages.Stage` value; empty: none), carried as events to the builder."""

    def __call__(self, text: str, stage: str = "") -> None: ...


class EventKind(str, enum.Enum):
    STARTED = "started"
    """The task reached a worker that is ready to run it."""
    PROGRESS = "progress"
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

    @classmethod
    def failed(cls, task_id: str, failure: TaskFailure | str) -> Event:
        """A FAILED event; a plain string is a build failure at the program (a crash, a cancel)."""
        if isinstance(failure, str):
            failure = TaskFailure(FailureKind.BUILD, failure)
        return cls(task_id, EventKind.FAILED, failure.message, failure=failure)
