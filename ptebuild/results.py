"""Typed values that cross the seams: what an action produced, and what a build did with it.

These are frozen dataclasses with ``to_json``/``from_json`` (plain, JSON-able dicts), so that the
same value travels between a worker and the builder, a local and a remote cache tier, and into
the build record, without dicts of strings in between: check figures
(:mod:`ptebuild.figures`), the program's insight (:mod:`ptebuild.insight.program`), stage spans
and budget breaches are typed values here, written to JSON by their own classes. Nothing here
imports torch, executorch or pydantic.

An action result as a JSON document (what a cache tier stores under the action key)::

    {"format": "ptebuild-action", "version": 2, "key": "<xxh3-128 hex>",
     "target": "policy_xnnpack", "kind": "program", "backend": "xnnpack",
     "outputs": [{"name": "policy_xnnpack.pte", "sha256": "...", "bytes": 75040}, ...],
     "inputs": {"manifest.model.factory": "...", "source:models/robot_policy.py": "<sha256>", ...},
     "deps": {"sources": {"layers/blocks.py": "<sha256>"}, "dists": {"torchao": "0.18.0"}},
     "figures": [{"method": ..., "sizes": {...}, "output": 0, "max_abs_error": ..., "cosine": ...}],
     "check": "executorch-runtime", "delegates": {"forward": 1}, "lower_seconds": 12.3,
     "built_on": "host-name",
     "insight": {"delegation": {...}, "size": null, "memory": {...}},
     "stages": [{"stage": "export", "start": 0.81, "end": 2.4}, ...]}

``insight`` is what the worker counted in the lowered program that the files do not keep (its
delegation by operator, mutable buffers, inputs' and outputs' bytes: :mod:`ptebuild.insight.program`);
``stages`` how long each stage of the lowering took (:mod:`ptebuild.insight.stages`), which says
how long a build of the program is expected to take next time. Both are absent from entries
written before them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ptebuild.deps import Dependencies
from ptebuild.figures import CheckFigures, CheckSummary, read_figures
from ptebuild.insight.budget import BudgetBreach
from ptebuild.insight.program import ProgramInsight
from ptebuild.insight.stages import StageSpan, spans_from_json

if TYPE_CHECKING:
    from pathlib import Path

    from ptebuild.insight.delegation import Delegation
    from ptebuild.insight.memory import MethodMemory
    from ptebuild.insight.sizes import SizeSplit
    from ptebuild.insight.weights import WeightsSplit

ACTION_FORMAT = "ptebuild-action"
ACTION_VERSION = 2


class Status(str, enum.Enum):
    """What happened to one target in one build."""

    BUILT = "built"
    CACHED = "cached"
    FAILED = "failed"
    SKIPPED = "skipped"
    NEEDS_GPU = "needs-gpu"
    """A program that only a machine with a CUDA GPU can build, and that no cache had."""
    CANNOT_LOWER = "cannot-lower"
    """A program this machine cannot lower (a cross toolchain it lacks, a backend the probe could
    not lower here), and that no cache had."""
    CANNOT_CHECK = "cannot-check"
    """A program whose check cannot run on this machine (ExecuTorch's runtime fails under this
    torch, says the probe), and that no cache had: never published unchecked."""
    OVER_BUDGET = "over-budget"
    """A program built (or restored) whose figures break its budget (``budget`` in the manifest):
    its files are in place, and the build fails."""
    PENDING = "pending"

    def __str__(self) -> str:
        return self.value

    @property
    def failed(self) -> bool:
        """True for a target the build did not deliver (exit 1)."""
        return self in _NOT_DELIVERED


_NOT_DELIVERED = frozenset({Status.FAILED, Status.NEEDS_GPU, Status.CANNOT_LOWER, Status.CANNOT_CHECK, Status.OVER_BUDGET})


class FailureKind(str, enum.Enum):
    """Whom a failure is for: the user's manifest or model code (exit 2), or the build (exit 1)."""

    MANIFEST = "manifest"
    BUILD = "build"
    STALE = "stale"
    """The worker's imported libraries changed on disk since it imported them: run the task again
    in a new worker process (never reported as such unless that fails too)."""
    STORE = "store"
    """The task could not write its outputs into its store (a full or read-only cache): the
    builder gives it another store and runs it again (never reported as such unless that fails too)."""


class Source(str, enum.Enum):
    """Where a cached result came from."""

    LOCAL = "local"
    REMOTE = "remote"


@dataclass(frozen=True)
class OutputFile:
    """One output file as content: its name in the output folder, SHA-256 and size."""

    name: str
    sha256: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "sha256": self.sha256, "bytes": self.size}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OutputFile:
        name, sha256, size = data["name"], data["sha256"], data["bytes"]
        if not isinstance(name, str) or not isinstance(sha256, str) or not isinstance(size, int):
            raise TypeError("output needs a name, a sha256 and a size in bytes")
        return cls(name, sha256, size)


@dataclass(frozen=True)
class ActionResult:
    """What one action (a program's lowering, a shim library's writing) produced: by content."""

    key: str
    target: str
    kind: str
    """``"program"`` or ``"shims"``."""
    outputs: tuple[OutputFile, ...]
    inputs: dict[str, str] = field(default_factory=dict)
    """The breakdown the key was computed from (for --explain, the lockfile and provenance)."""
    deps: Dependencies = field(default_factory=Dependencies)
    backend: str | None = None
    figures: tuple[CheckFigures, ...] = ()
    check: str = ""
    """Which check the program passed (``executorch-runtime``, ``aoti-runner-cuda``...); empty: none."""
    delegates: dict[str, int] = field(default_factory=dict)
    lower_seconds: float = 0.0
    built_on: str = ""
    insight: ProgramInsight | None = None
    """The worker's half of the program's figures, None if unknown."""
    stages: tuple[StageSpan, ...] = ()
    """The worker's stage spans, relative to its task's start."""

    @property
    def digests(self) -> list[str]:
        return sorted({o.sha256 for o in self.outputs})

    def output(self, name: str) -> OutputFile | None:
        return next((o for o in self.outputs if o.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": ACTION_FORMAT,
            "version": ACTION_VERSION,
            "key": self.key,
            "target": self.target,
            "kind": self.kind,
            "backend": self.backend,
            "outputs": [o.to_json() for o in self.outputs],
            "inputs": dict(self.inputs),
            "deps": self.deps.to_json(),
            "figures": [f.to_json() for f in self.figures],
            "check": self.check,
            "delegates": dict(self.delegates),
            "lower_seconds": round(self.lower_seconds, 3),
            "built_on": self.built_on,
            **({"insight": self.insight.to_json()} if self.insight is not None else {}),
            **({"stages": [s.to_json() for s in self.stages]} if self.stages else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ActionResult:
        """Raise TypeError, KeyError or ValueError if ``data`` is not an action result."""
        if data.get("format") != ACTION_FORMAT or data.get("version") != ACTION_VERSION:
            raise ValueError("not a ptebuild action result of this version")
        outputs = tuple(OutputFile.from_json(o) for o in data["outputs"])
        if not outputs:
            raise ValueError("an action result names at least one output")
        inputs = data.get("inputs") or {}
        if not isinstance(inputs, dict):
            raise TypeError("inputs must be an object")
        return cls(
            key=str(data["key"]),
            target=str(data["target"]),
            kind=str(data["kind"]),
            outputs=outputs,
            inputs={str(k): str(v) for k, v in inputs.items()},
            deps=Dependencies.from_json(data.get("deps")),
            backend=data.get("backend"),
            figures=tuple(read_figures(f) for f in data.get("figures") or ()),
            check=str(data.get("check") or ""),
            delegates={str(k): int(v) for k, v in (data.get("delegates") or {}).items()},
            lower_seconds=float(data.get("lower_seconds") or 0.0),
            built_on=str(data.get("built_on") or ""),
            insight=ProgramInsight.from_json(data["insight"]) if isinstance(data.get("insight"), dict) else None,
            stages=spans_from_json(data.get("stages")),
        )


@dataclass
class TargetResult:
    """What one build did with one program or shim library (the JSON report's entries).

    Mutable while the build runs (one object per target, filled in as events arrive); the JSON
    form is what ``ptebuild build --json`` prints.
    """

    name: str
    kind: str
    backend: str | None
    out_dir: str = ""
    status: Status = Status.PENDING
    seconds: float = 0.0
    outputs: tuple[OutputFile, ...] = ()
    figures: tuple[CheckFigures, ...] = ()
    check: str = ""
    methods: tuple[dict[str, Any], ...] = ()
    """Each method as the manifest declares it (:func:`ptebuild.builder.program_target.method_specs`)."""
    message: str = ""
    explain: list[str] = field(default_factory=list)
    failure: FailureKind = FailureKind.BUILD
    key: str = ""
    source: Source | None = None
    """Where a cached result came from (local or remote cache)."""
    node: str = ""
    """Which machine built it (executors that run elsewhere)."""
    rebuild: str = ""
    """``--reproduce``: ``"same"`` or ``"differs"`` after lowering again; empty when not checked."""
    insight: ProgramInsight | None = None
    """The program's figures (delegation, size, memory), None if unknown."""
    budget: tuple[BudgetBreach, ...] = ()
    """Each budget limit it breaks."""
    cache_hit: bool = False
    """Its result came from a cache: nothing was lowered for it in this build."""
    renames: tuple[tuple[str, str, str], ...] = ()
    """A failure of a manifest written for a release that passed inputs by position: ``(key, old
    name, new name)`` of each input to rename (``--json``'s ``renames``); said once per manifest."""
    brought_along: str = ""
    """Why a target that the request did not name was built too (``only=``): it shares a weights
    file with one it named, and a shared ``.ptd`` is built whole. Empty: it was asked for."""

    @property
    def checked(self) -> CheckSummary | None:
        """What the check held the outputs to and measured (tolerances by dtype, the data, the
        worst figures, the verdict): ``--json``'s ``checked``; None when it compared no numbers."""
        return CheckSummary.of(self.figures)

    @property
    def delegation(self) -> Delegation | None:
        """``insight``'s delegation (``--json``'s ``delegation``); None when unknown."""
        return self.insight.delegation if self.insight is not None else None

    @property
    def size(self) -> SizeSplit | None:
        """``insight``'s size split (``--json``'s ``size``); None when unknown."""
        return self.insight.size if self.insight is not None else None

    @property
    def memory(self) -> tuple[MethodMemory, ...]:
        """``insight``'s memory per method (``--json``'s ``memory``)."""
        return self.insight.memory if self.insight is not None else ()

    @property
    def weights(self) -> WeightsSplit | None:
        """``insight``'s weights, quantized and float (``--json``'s ``weights``); None when not counted."""
        return self.insight.weights if self.insight is not None else None

    def take(self, result: ActionResult) -> None:
        """Fill in the outputs and check figures of ``result``."""
        self.outputs = result.outputs
        self.figures = result.figures
        self.check = result.check

    def to_json(self) -> dict[str, Any]:
        """The entry of ``ptebuild build --json``'s ``targets``: the fields of this class by their
        names (``figures``, ``check``, ``message``...), outputs as paths."""
        data: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "backend": self.backend,
            "status": self.status.value,
            "seconds": round(self.seconds, 3),
            "methods": list(self.methods),
            "outputs": [
                {"path": str(_join(self.out_dir, o.name)), "sha256": o.sha256, "bytes": o.size}
                for o in self.outputs
            ],
            "figures": [f.to_json() for f in self.figures],
            "check": self.check,
            "key": self.key,
        }
        summary = self.checked
        if summary is not None:
            data["checked"] = summary.to_json()
        if self.source is not None:
            data["source"] = self.source.value
        if self.node:
            data["node"] = self.node
        if self.rebuild:
            data["rebuild"] = self.rebuild
        if self.brought_along:
            data["brought_along"] = self.brought_along
        if self.message:
            data["message"] = self.message
        if self.explain:
            data["explain"] = list(self.explain)
        if self.renames:
            data["renames"] = [list(r) for r in self.renames]
        if self.insight is not None:
            data.update(self.insight.to_json())  # "delegation", "size", "memory"
        if self.budget:
            data["budget"] = [b.to_json() for b in self.budget]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TargetResult:
        """The result :meth:`to_json` wrote (a replayed no-op build's report)."""
        from pathlib import PurePath

        outputs = tuple(OutputFile(PurePath(o["path"]).name, o["sha256"], o["bytes"]) for o in data.get("outputs", ()))
        folders = {str(PurePath(o["path"]).parent) for o in data.get("outputs", ())}
        return cls(
            name=data["name"],
            kind=data["kind"],
            backend=data.get("backend"),
            out_dir=folders.pop() if len(folders) == 1 else "",
            status=Status(data["status"]),
            seconds=float(data.get("seconds") or 0.0),
            outputs=outputs,
            figures=tuple(read_figures(f) for f in data.get("figures") or ()),
            check=str(data.get("check") or ""),
            methods=tuple(data.get("methods") or ()),
            message=str(data.get("message") or ""),
            explain=list(data.get("explain") or ()),
            key=str(data.get("key") or ""),
            source=Source(data["source"]) if data.get("source") else None,
            node=str(data.get("node") or ""),
            rebuild=str(data.get("rebuild") or ""),
            brought_along=str(data.get("brought_along") or ""),
            renames=tuple((str(a), str(b), str(c)) for a, b, c in data.get("renames") or ()),
            insight=ProgramInsight.from_json({part: data.get(part) for part in ("delegation", "size", "memory", "weights")})
            if "size" in data else None,
            budget=tuple(BudgetBreach.from_json(b) for b in data.get("budget") or ()),
        )


def _join(folder: str, name: str) -> Path:
    from pathlib import Path

    return Path(folder, name)
