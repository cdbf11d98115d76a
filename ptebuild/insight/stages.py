"""The stages of a program's build, timed where they run.

A worker marks each stage as it begins (:class:`StageClock`, on the monotonic clock, relative to
the task's start) and sends the spans back with the result; the builder times its own stages
(waiting for a worker, restoring from the cache, storing) on its clock. A span's times are
seconds. The last build's spans, kept with its action result, say how long each stage took
then: :func:`expected_seconds` (for "still lowering ... of ~40s expected").

JSON of a span: ``{"stage": "lowering", "start": 3.012, "end": 11.870}``.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


class Stage(str, enum.Enum):
    """What a program's build is doing."""

    WAITING = "waiting"
    """Submitted, not yet running in a worker (a free worker, its start-up, the queue)."""
    IMPORT = "model-import"
    """Importing the model's code and making the model (its factory, its weights)."""
    EXPORT = "export"
    """``torch.export`` of each method, and the backend's preparation (quantization)."""
    LOWER = "lowering"
    """``to_edge_transform_and_lower``: the partitioner and the delegates' compilation."""
    EMIT = "emitting"
    """``to_executorch`` and writing the ``.pte``, ``.ptd`` (and ETRecord)."""
    CHECK = "checking"
    """Running the program against eager PyTorch (or its structural check)."""
    BUNDLE = "bundling"
    """Writing the ``.bpte``: the program with its test cases."""
    STORE = "storing"
    """Putting the outputs into the cache and the output folder."""
    RESTORE = "restore"
    """Bringing a cached result's files into the output folder."""

    def __str__(self) -> str:
        return self.value


WORKER_STAGES = (Stage.IMPORT, Stage.EXPORT, Stage.LOWER, Stage.EMIT, Stage.CHECK, Stage.BUNDLE)


@dataclass(frozen=True)
class StageSpan:
    """One stage from ``start`` to ``end`` (seconds on the clock of whoever timed it)."""

    stage: Stage
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)

    def shifted(self, offset: float) -> StageSpan:
        return StageSpan(self.stage, self.start + offset, self.end + offset)

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage.value, "start": round(self.start, 3), "end": round(self.end, 3)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StageSpan:
        """Raises ValueError (an unknown stage), KeyError or TypeError."""
        return cls(Stage(data["stage"]), float(data["start"]), float(data["end"]))


def spans_from_json(data: Any) -> tuple[StageSpan, ...]:
    """Spans as an action result keeps them; anything malformed reads as none (they only inform)."""
    try:
        return tuple(StageSpan.from_json(item) for item in data or ())
    except (KeyError, TypeError, ValueError, AttributeError):
        return ()


class StageClock:
    """Marks stages as they begin, on a monotonic clock relative to the clock's creation.

    :meth:`begin` closes the stage in progress and opens the next; :meth:`spans` closes the last
    and returns them all. ``on_begin(stage)`` hears of each new stage (a worker tells the builder).
    """

    def __init__(self, on_begin: Callable[[Stage], None] | None = None, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self._zero = now()
        self._open: tuple[Stage, float] | None = None
        self._done: list[StageSpan] = []
        self._on_begin = on_begin

    def elapsed(self) -> float:
        return self._now() - self._zero

    @property
    def current(self) -> Stage | None:
        """The stage in progress (None before the first, or after :meth:`spans`)."""
        return self._open[0] if self._open is not None else None

    def begin(self, stage: Stage) -> None:
        at = self.elapsed()
        self._close(at)
        self._open = (stage, at)
        if self._on_begin is not None:
            self._on_begin(stage)

    def spans(self) -> tuple[StageSpan, ...]:
        self._close(self.elapsed())
        return tuple(self._done)

    def _close(self, at: float) -> None:
        if self._open is not None:
            stage, start = self._open
            self._done.append(StageSpan(stage, start, at))
            self._open = None


def seconds_by_stage(spans: Iterable[StageSpan]) -> dict[Stage, float]:
    """How long each stage took, over all its spans."""
    total: dict[Stage, float] = {}
    for span in spans:
        total[span.stage] = total.get(span.stage, 0.0) + span.seconds
    return total


def expected_seconds(last: Iterable[StageSpan], stage: Stage) -> float | None:
    """How long ``stage`` took in the last build (None: it did not run then, or took no time)."""
    seconds = seconds_by_stage(last).get(stage)
    return seconds if seconds else None


def share_text(elapsed: float, expected: float | None) -> str:
    """``32s of ~40s expected, 80%`` (``32s`` without an expectation; past it: ``50s, ~40s expected``)."""
    if expected is None:
        return f"{elapsed:.0f}s"
    if elapsed > expected:
        return f"{elapsed:.0f}s, ~{expected:.0f}s expected"
    return f"{elapsed:.0f}s of ~{expected:.0f}s expected, {100 * elapsed / expected:.0f}%"
