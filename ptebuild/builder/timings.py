"""``ptebuild build --timings``: what each target did when, collected as the build runs, written
as ``<out>/.ptebuild/timings.html`` (:mod:`ptebuild.insight.timeline_html`, one self-contained
page) and ``<out>/.ptebuild/timings.trace.json`` (a Chrome trace, :mod:`ptebuild.insight.timeline`).

The builder tells a :class:`Timings` what happened, on its own monotonic clock: a restore from
the cache (start, end), a task submitted and its result arriving with the worker's stage spans,
the outputs stored. :meth:`Timings.timeline` lays the tasks on lanes and makes the typed
timeline; :func:`write` writes both files atomically (each replaces the last build's).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ptebuild.atomic import write_atomically
from ptebuild.insight.program import ProgramInsight
from ptebuild.insight.stages import Stage, StageSpan
from ptebuild.insight.timeline import BUILDER_LANE, TargetTimeline, Timeline, assign_lanes, place_worker_spans
from ptebuild.results import Source, Status, TargetResult
from ptebuild.runtime.record import RecordEntry

FOLDER = Path(".ptebuild")
PAGE = "timings.html"
TRACE = "timings.trace.json"


@dataclass
class _Target:
    spans: list[StageSpan] = field(default_factory=list)
    task: tuple[float, float] | None = None
    """``(submitted, finished)`` of its last task, on the builder's clock since the build began."""


class Timings:
    """What each target did when, since the build began (see the module docstring)."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self._zero = now()
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self._targets: dict[str, _Target] = {}

    def now(self) -> float:
        """Seconds since the build began."""
        return self._now() - self._zero

    def _target(self, name: str) -> _Target:
        return self._targets.setdefault(name, _Target())

    def span(self, name: str, stage: Stage, start: float, end: float | None = None) -> None:
        """A stage the builder itself ran (a restore, storing), from ``start`` to ``end`` (now)."""
        self._target(name).spans.append(StageSpan(stage, start, self.now() if end is None else end))

    def task(self, name: str, submitted: float, finished: float, worker: Sequence[StageSpan] | None) -> None:
        """A task of ``name`` submitted at ``submitted`` whose result arrived at ``finished``, with
        the stages its worker timed (relative to the task's start); None: a failed task, whose
        stages are unknown (its box is drawn empty)."""
        target = self._target(name)
        if worker is not None:
            target.spans.extend(place_worker_spans(worker, submitted, finished))
        target.task = (submitted, finished)

    def timeline(self, manifest: str, results: Sequence[TargetResult], figures: Mapping[str, ProgramInsight],
                 executor: str = "", jobs: int = 1) -> Timeline:
        """The build's timeline: every target of ``results`` (in their order), their figures."""
        tasks = [(name, t.task) for name, t in self._targets.items() if t.task is not None]
        lanes = dict(zip((name for name, _ in tasks), assign_lanes(
            (task[0], max([task[1], *(s.end for s in self._targets[name].spans)])) for name, task in tasks)))
        targets = []
        for result in results:
            target = self._targets.get(result.name, _Target())
            spans = tuple(sorted(target.spans, key=lambda s: s.start))
            bounds = [*(s.start for s in spans), *(target.task or ())]
            start = min(bounds, default=0.0)
            end = max([*(s.end for s in spans), *(target.task or ())], default=start)
            targets.append(TargetTimeline(
                name=result.name, backend=result.backend, status=str(result.status), start=start, end=end, spans=spans,
                lane=lanes.get(result.name, BUILDER_LANE),
                cache_hit=result.cache_hit or result.status is Status.CACHED,
                source=result.source.value if isinstance(result.source, Source) else "",
                node=result.node, insight=figures.get(result.name), check=tuple(result.figures), message=result.message,
            ))
        count = max(lanes.values(), default=0)
        names = ("builder", *(f"worker {n}" for n in range(1, count + 1)))
        return Timeline(manifest, self.now(), tuple(targets), self.started_at, executor, jobs, names)


def figures_of(entries: Mapping[str, RecordEntry]) -> dict[str, ProgramInsight]:
    """Each program's figures as the build record's entries keep them (those that have some)."""
    figures = {}
    for name, entry in entries.items():
        if entry.insight is not None:
            try:
                figures[name] = ProgramInsight.from_json(entry.insight)
            except (KeyError, TypeError, ValueError):
                pass
    return figures


def write(out_dir: Path, timeline: Timeline) -> tuple[Path, Path]:
    """Write the page and the trace into ``<out_dir>/.ptebuild/``; return their paths. Raises OSError."""
    import json

    from ptebuild.insight.timeline_html import render

    folder = Path(out_dir) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    page, trace = folder / PAGE, folder / TRACE
    write_atomically(page, render(timeline).encode("utf-8"))
    write_atomically(trace, (json.dumps(timeline.chrome_trace(), indent=1) + "\n").encode("utf-8"))
    return page, trace
