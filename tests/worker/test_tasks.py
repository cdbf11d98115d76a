"""Tasks and events as values: the news that a task's outputs are stored, before its result."""

from __future__ import annotations

from ptebuild.results import OutputFile
from ptebuild.worker.tasks import Event, EventKind, StagedProgress, outputs_stored

OUTPUTS = (OutputFile("p.pte", "a" * 64, 10), OutputFile("p.ptd", "b" * 64, 20))


def test_a_staged_progress_carries_the_stored_outputs_and_a_plain_callable_ignores_them():
    sent: list[object] = []
    progress = StagedProgress(lambda text, stage: sent.append((text, stage)), stored=sent.append)
    outputs_stored(progress, OUTPUTS)
    outputs_stored(progress, ())  # nothing stored: no news
    progress("checking")
    assert sent == [OUTPUTS, ("checking", "")]
    outputs_stored(lambda text: sent.append(text), OUTPUTS)  # a task run without an executor
    StagedProgress(lambda text, stage: None).outputs_stored(OUTPUTS)  # an executor that does not carry it
    assert len(sent) == 2


def test_stored_news_from_json_and_malformed_news_is_dropped():
    event = Event.stored("p", [o.to_json() for o in OUTPUTS])
    assert event is not None and event.kind is EventKind.STORED and event.outputs == OUTPUTS
    for bad in (None, 3, [{"name": "p.pte"}], [{"name": 1, "sha256": "a", "bytes": 1}], [], "p.pte"):
        assert Event.stored("p", bad) is None, bad
