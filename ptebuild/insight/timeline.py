"""A build's timeline: each target's stages on a time axis, by lane, with its figures.

Made by the builder as it builds (:mod:`ptebuild.builder.timings`), written by ``ptebuild build
--timings`` as a Chrome trace (:meth:`Timeline.chrome_trace`: the Trace Event Format, which
``chrome://tracing`` and Perfetto open) and as a page (:mod:`.timeline_html`).

Times are seconds since the build began, on the builder's monotonic clock. A worker's stages
come timed on its own clock, relative to its task's start; they are placed so that the task
ends when its result arrived (:func:`place_worker_spans`: the same rule whichever executor, or
machine, ran it). Lanes: lane 0 is the builder itself (restores, storing); tasks are laid on
lanes 1.. so that no two overlap (:func:`assign_lanes`), one lane per worker slot in use.

Trace events: one complete event (``"ph": "X"``) per target on its lane, holding one per stage
(nested by time, as Perfetto draws them), microseconds since the build began; metadata events
name the process and the lanes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ptebuild.figures import CheckFigures
from ptebuild.insight.program import ProgramInsight
from ptebuild.insight.stages import Stage, StageSpan

BUILDER_LANE = 0


@dataclass(frozen=True)
class TargetTimeline:
    """One target of the build: when, where, each stage, and what came out."""

    name: str
    backend: str | None
    status: str
    """The target's status as the report says it (``built``, ``cached``, ``failed``...)."""
    start: float
    end: float
    spans: tuple[StageSpan, ...] = ()
    lane: int = BUILDER_LANE
    cache_hit: bool = False
    """Its result came from a cache (local or remote), nothing was lowered."""
    source: str = ""
    """``local`` or ``remote`` for a cache hit."""
    node: str = ""
    insight: ProgramInsight | None = None
    check: tuple[CheckFigures, ...] = ()
    """The check's figures."""
    message: str = ""

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "backend": self.backend,
            "status": self.status,
            "start": round(self.start, 3),
            "end": round(self.end, 3),
            "lane": self.lane,
            "cache_hit": self.cache_hit,
            "source": self.source,
            "node": self.node,
            "stages": [s.to_json() for s in self.spans],
            "insight": self.insight.to_json() if self.insight is not None else None,
            "check": [f.to_json() for f in self.check],
            "message": self.message,
        }


@dataclass(frozen=True)
class Timeline:
    """A whole build (see the module docstring)."""

    manifest: str
    seconds: float
    targets: tuple[TargetTimeline, ...]
    started_at: str = ""
    """When it began, as ISO 8601 text (for the page's title; not used to place anything)."""
    executor: str = ""
    jobs: int = 1
    lanes: tuple[str, ...] = field(default=("builder",))

    @property
    def hits(self) -> int:
        return sum(1 for t in self.targets if t.cache_hit)

    @property
    def misses(self) -> int:
        """Targets that were lowered (or tried to be) because no cache had them."""
        return sum(1 for t in self.targets if not t.cache_hit and any(s.stage is not Stage.RESTORE for s in t.spans))

    def to_json(self) -> dict[str, Any]:
        return {
            "manifest": self.manifest,
            "seconds": round(self.seconds, 3),
            "started_at": self.started_at,
            "executor": self.executor,
            "jobs": self.jobs,
            "lanes": list(self.lanes),
            "targets": [t.to_json() for t in self.targets],
        }

    def chrome_trace(self) -> dict[str, Any]:
        """The timeline in the Trace Event Format (JSON object form)."""
        events: list[dict[str, Any]] = [
            {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": f"ptebuild build {self.manifest}"}},
        ]
        for lane, name in enumerate(self.lanes):
            events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": lane, "args": {"name": name}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": lane, "args": {"sort_index": lane}})
        for target in self.targets:
            args: dict[str, Any] = {"status": target.status, "backend": target.backend, "cache": "hit" if target.cache_hit else "miss"}
            if target.node:
                args["node"] = target.node
            figures = target.insight
            if figures is not None:
                delegated, size, planned = figures.cells()
                args.update(delegated=delegated, size=size, planned_memory=planned)
            if target.message:
                args["message"] = target.message
            events.append(_complete(target.name, "target", target.lane, target.start, target.end, args))
            for span in target.spans:
                start, end = max(span.start, target.start), min(span.end, target.end)
                events.append(_complete(span.stage.value, "stage", target.lane, start, max(start, end), {"program": target.name}))
        return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"manifest": self.manifest, "executor": self.executor,
                                                                              "jobs": self.jobs, "started_at": self.started_at}}


def _complete(name: str, category: str, lane: int, start: float, end: float, args: Mapping[str, Any]) -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": category, "pid": 1, "tid": lane, "ts": round(start * 1e6),
            "dur": max(0, round((end - start) * 1e6)), "args": dict(args)}


def place_worker_spans(spans: Sequence[StageSpan], submitted: float, finished: float) -> tuple[StageSpan, ...]:
    """A worker's spans (relative to its task's start) placed on the builder's clock: the task ends
    at ``finished`` (when its result arrived), and the time before its first stage, from
    ``submitted``, is :attr:`~.stages.Stage.WAITING`. Spans that would begin before ``submitted``
    (a clock that ran fast, a result delayed in transit) are moved to begin there."""
    if not spans:
        return (StageSpan(Stage.WAITING, submitted, finished),) if finished > submitted else ()
    offset = finished - max(s.end for s in spans)
    offset = max(offset, submitted - min(s.start for s in spans))
    placed = tuple(s.shifted(offset) for s in spans)
    first = min(s.start for s in placed)
    waiting = (StageSpan(Stage.WAITING, submitted, first),) if first > submitted else ()
    return waiting + placed


def assign_lanes(intervals: Iterable[tuple[float, float]], first: int = 1) -> list[int]:
    """A lane for each ``(start, end)``, from ``first`` on, so that no two on one lane overlap,
    using as few lanes as the overlap needs (the earliest-starting first, each on the lowest free lane)."""
    items = list(intervals)
    order = sorted(range(len(items)), key=lambda i: (items[i][0], items[i][1]))
    ends: list[float] = []
    lanes = [0] * len(items)
    for i in order:
        start, end = items[i]
        lane = next((n for n, last in enumerate(ends) if last <= start + 1e-6), None)
        if lane is None:
            lane = len(ends)
            ends.append(end)
        else:
            ends[lane] = end
        lanes[i] = first + lane
    return lanes
