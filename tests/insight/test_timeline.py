"""A build's timeline: worker spans placed on the builder's clock, lanes that never overlap, and
the Chrome trace (Trace Event Format) of it."""

from __future__ import annotations

import itertools
import json

import pytest
from insight_data import figures

from ptebuild.figures import read_figures
from ptebuild.insight.stages import Stage, StageSpan
from ptebuild.insight.timeline import TargetTimeline, Timeline, assign_lanes, place_worker_spans


def test_worker_spans_end_when_the_result_arrived_and_waiting_fills_the_start():
    spans = (StageSpan(Stage.IMPORT, 0.2, 1.0), StageSpan(Stage.LOWER, 1.0, 5.0))
    placed = place_worker_spans(spans, submitted=10.0, finished=20.0)
    assert placed == (StageSpan(Stage.WAITING, 10.0, 15.2), StageSpan(Stage.IMPORT, 15.2, 16.0), StageSpan(Stage.LOWER, 16.0, 20.0))
    # A worker that says it took longer than the builder waited: moved to start at the submission.
    late = place_worker_spans(spans, submitted=10.0, finished=12.0)
    assert late[0] == StageSpan(Stage.IMPORT, 10.0, 10.8) and late[-1].end == pytest.approx(14.8)
    assert place_worker_spans((), 1.0, 3.0) == (StageSpan(Stage.WAITING, 1.0, 3.0),)


def test_lanes_never_overlap_and_are_as_few_as_needed():
    intervals = [(0, 10), (1, 4), (4, 6), (5, 12), (11, 13)]
    lanes = assign_lanes(intervals)
    assert lanes == [1, 2, 2, 3, 1]
    for lane in set(lanes):
        mine = sorted(i for i, n in zip(intervals, lanes) if n == lane)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(mine))


def _timeline() -> Timeline:
    built = TargetTimeline("policy_xnnpack", "xnnpack", "built", 0.5, 9.0,
                           (StageSpan(Stage.WAITING, 0.5, 1.0), StageSpan(Stage.LOWER, 1.0, 8.5), StageSpan(Stage.STORE, 8.5, 9.5)),
                           lane=1, insight=figures(), check=(read_figures({"method": "forward", "sizes": {}, "output": 0, "max_abs_error": 1e-6, "cosine": 1.0}),))
    cached = TargetTimeline("policy_portable", "portable", "cached", 0.1, 0.3, (StageSpan(Stage.RESTORE, 0.1, 0.3),),
                            cache_hit=True, source="local")
    return Timeline("robot.toml", 9.6, (built, cached), "2026-12-03T10:00:00+00:00", "local", 2, ("builder", "worker 1"))


def test_counts_and_json():
    timeline = _timeline()
    assert (timeline.hits, timeline.misses) == (1, 1)
    document = json.loads(json.dumps(timeline.to_json()))
    assert [t["name"] for t in document["targets"]] == ["policy_xnnpack", "policy_portable"]
    assert document["targets"][0]["stages"][1] == {"stage": "lowering", "start": 1.0, "end": 8.5}


def test_the_chrome_trace_nests_stages_in_their_target():
    trace = json.loads(json.dumps(_timeline().chrome_trace()))
    events = trace["traceEvents"]
    assert {e["args"]["name"] for e in events if e["name"] == "thread_name"} == {"builder", "worker 1"}
    complete = [e for e in events if e["ph"] == "X"]
    target = next(e for e in complete if e["name"] == "policy_xnnpack")
    assert (target["ts"], target["dur"], target["tid"]) == (500_000, 8_500_000, 1)
    assert target["args"]["delegated"] == "90.0%" and target["args"]["cache"] == "miss"
    stages = [e for e in complete if e["cat"] == "stage" and e["args"]["program"] == "policy_xnnpack"]
    assert [s["name"] for s in stages] == ["waiting", "lowering", "storing"]
    for stage in stages:  # inside the target's box (the storing span is cut at its end)
        assert target["ts"] <= stage["ts"] and stage["ts"] + stage["dur"] <= target["ts"] + target["dur"]
    assert all(isinstance(e["ts"], int) for e in complete)
