"""The build's timings as the builder collects them: restores on the builder's lane, tasks on
worker lanes that never overlap, worker spans placed on the builder's clock, both files written."""

from __future__ import annotations

import json

from ptebuild.builder.timings import Timings, write
from ptebuild.insight.stages import Stage, StageSpan
from ptebuild.results import Source, Status, TargetResult


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_a_build_with_a_restore_and_two_tasks(tmp_path):
    clock = Clock()
    timings = Timings(now=clock)
    timings.span("cached", Stage.RESTORE, 0.0, 0.2)
    worker = (StageSpan(Stage.IMPORT, 0.0, 1.0), StageSpan(Stage.LOWER, 1.0, 4.0))
    timings.task("a", 0.3, 6.0, worker)
    timings.span("a", Stage.STORE, 6.0, 6.5)
    timings.task("b", 0.4, 5.0, worker)
    clock.now = 57.0
    results = [
        TargetResult("cached", "program", "portable", status=Status.CACHED, source=Source.LOCAL),
        TargetResult("a", "program", "xnnpack", status=Status.BUILT, figures=({"max_abs_error": 0.0, "cosine": 1.0},)),
        TargetResult("b", "program", "xnnpack", status=Status.FAILED, message="boom"),
        TargetResult("skipped", "program", "xnnpack", status=Status.SKIPPED),
    ]
    timeline = timings.timeline("m.toml", results, {}, executor="local", jobs=2)
    by_name = {t.name: t for t in timeline.targets}
    assert [t.name for t in timeline.targets] == ["cached", "a", "b", "skipped"]
    assert timeline.seconds == 7.0 and timeline.lanes == ("builder", "worker 1", "worker 2")
    assert by_name["cached"].lane == 0 and by_name["cached"].cache_hit and by_name["cached"].source == "local"
    assert {by_name["a"].lane, by_name["b"].lane} == {1, 2}
    a = by_name["a"]
    assert [s.stage for s in a.spans] == [Stage.WAITING, Stage.IMPORT, Stage.LOWER, Stage.STORE]
    assert (a.start, a.end) == (0.3, 6.5) and a.spans[2].end == 6.0
    assert by_name["skipped"].spans == () and (timeline.hits, timeline.misses) == (1, 2)
    page, trace = write(tmp_path, timeline)
    assert page == tmp_path / ".ptebuild" / "timings.html" and "worker 2" in page.read_text()
    assert json.loads(trace.read_text())["traceEvents"]
