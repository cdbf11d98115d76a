"""Stage spans timed on a clock, their JSON, and how long the last build's stage took."""

from __future__ import annotations

import pytest

from ptebuild.insight.stages import Stage, StageClock, StageSpan, expected_seconds, seconds_by_stage, share_text, spans_from_json


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_stage_runs_until_the_next_begins():
    clock = FakeClock()
    heard = []
    stages = StageClock(heard.append, now=clock)
    clock.now = 100.5
    stages.begin(Stage.IMPORT)
    clock.now = 101.0
    stages.begin(Stage.EXPORT)
    clock.now = 104.0
    stages.begin(Stage.LOWER)
    clock.now = 110.0
    spans = stages.spans()
    assert spans == (StageSpan(Stage.IMPORT, 0.5, 1.0), StageSpan(Stage.EXPORT, 1.0, 4.0), StageSpan(Stage.LOWER, 4.0, 10.0))
    assert heard == [Stage.IMPORT, Stage.EXPORT, Stage.LOWER]
    assert stages.spans() == spans  # nothing open any more


def test_json_and_what_the_last_build_took():
    spans = (StageSpan(Stage.EXPORT, 0.0, 2.0), StageSpan(Stage.EXPORT, 3.0, 4.5), StageSpan(Stage.LOWER, 4.5, 40.5))
    assert spans_from_json([s.to_json() for s in spans]) == spans
    assert spans_from_json([{"stage": "compiling", "start": 0, "end": 1}]) == ()
    assert spans_from_json(None) == () and spans_from_json("x") == ()
    assert seconds_by_stage(spans) == {Stage.EXPORT: 3.5, Stage.LOWER: 36.0}
    assert expected_seconds(spans, Stage.LOWER) == 36.0 and expected_seconds(spans, Stage.CHECK) is None


@pytest.mark.parametrize(("elapsed", "expected", "text"), [
    (32, 40.0, "32s of ~40s expected, 80%"),
    (50, 40.0, "50s, ~40s expected"),
    (15, None, "15s"),
])
def test_share_text(elapsed, expected, text):
    assert share_text(elapsed, expected) == text
