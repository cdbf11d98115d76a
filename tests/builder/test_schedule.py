"""The scheduling loop's progress lines on long work: the stage a worker is in, and its share of
the time that stage took in the program's last build."""

from __future__ import annotations

from ptebuild.builder import schedule
from ptebuild.builder.schedule import Job, Scheduler
from ptebuild.results import OutputFile
from ptebuild.worker.tasks import Event, EventKind, Task, TaskResult


class Scripted:
    """An executor that answers each poll with the next batch of events, moving a fake clock."""

    name = "scripted"

    def __init__(self, clock: list[float], script: list[tuple[float, list[Event]]]) -> None:
        self.clock = clock
        self.script = list(script)
        self.submitted: list[str] = []

    def capacity(self) -> int:
        return 0 if self.submitted else 1

    def submit(self, task: Task) -> None:
        self.submitted.append(task.task_id)

    def poll(self, timeout: float) -> list[Event]:
        at, events = self.script.pop(0)
        self.clock[0] = at
        return events

    def cancel(self, task_id: str) -> None:
        pass

    def close(self, graceful: bool = True) -> None:
        pass


def test_a_stage_says_how_long_it_took_last_time_and_how_far_along_it_is(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(schedule.time, "monotonic", lambda: clock[0])
    done = TaskResult(outputs=())
    script = [
        (101.0, [Event("p", EventKind.PROGRESS, "exporting forward", stage="export")]),
        (102.0, [Event("p", EventKind.PROGRESS, "lowering for xnnpack", stage="lowering")]),
        (122.0, []),  # silent for 20 s: a heartbeat
        (140.0, []),  # past the expected 30 s: says so
        (141.0, [Event("p", EventKind.DONE, result=done)]),
    ]
    executor = Scripted(clock, script)
    lines: list[tuple[str, str, str]] = []
    expected = {("p", "lowering"): 30.0, ("p", "export"): 0.4}
    scheduler = Scheduler(executor, None, lambda *event: lines.append(event), ready=lambda job: False,
                          started=lambda job: None, finished=lambda job, event: True,
                          expected=lambda name, stage: expected.get((name, stage)))
    task = Task("p", "k", "p", "xnnpack", "{}", "m.toml", ".")
    assert scheduler.run([Job("p", "k", make_task=lambda: task)]) == []
    texts = [text for _, _, text in lines]
    assert texts == [
        "exporting forward",  # 0.4 s last time: not worth saying
        "lowering for xnnpack (~30s last time)",
        "still lowering for xnnpack (22s; lowering 20s of ~30s expected, 67%)",
        "still lowering for xnnpack (40s; lowering 38s, ~30s expected)",
    ]


def test_without_a_last_build_the_heartbeat_is_as_before(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(schedule.time, "monotonic", lambda: clock[0])
    script = [
        (1.0, [Event("p", EventKind.PROGRESS, "lowering for portable", stage="lowering")]),
        (20.0, []),
        (21.0, [Event("p", EventKind.DONE, result=TaskResult(outputs=()))]),
    ]
    lines: list[tuple[str, str, str]] = []
    Scheduler(Scripted(clock, script), None, lambda *event: lines.append(event), ready=lambda job: False,
              started=lambda job: None, finished=lambda job, event: True).run(
        [Job("p", "k", make_task=lambda: Task("p", "k", "p", "portable", "{}", "m.toml", "."))])
    assert [text for _, _, text in lines] == ["lowering for portable", "still lowering for portable (20s)"]


def test_outputs_stored_before_the_check_are_handed_on_before_the_result(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(schedule.time, "monotonic", lambda: clock[0])
    news = (OutputFile("p.pte", "a" * 64, 10), OutputFile("p.ptd", "b" * 64, 20))
    script = [
        (1.0, [Event("p", EventKind.STORED, outputs=news)]),
        (2.0, [Event("p", EventKind.PROGRESS, "checking against eager PyTorch", stage="checking")]),
        (3.0, [Event("p", EventKind.DONE, result=TaskResult(outputs=news))]),
    ]
    seen: list[tuple[str, object]] = []
    Scheduler(Scripted(clock, script), None, lambda *event: seen.append(("line", event[2])), ready=lambda job: False,
              started=lambda job: None, finished=lambda job, event: seen.append(("finished", job.name)) or True,
              stored=lambda job, event: seen.append(("stored", (job.name, event.outputs)))).run(
        [Job("p", "k", make_task=lambda: Task("p", "k", "p", "portable", "{}", "m.toml", "."))])
    assert seen == [("stored", ("p", news)), ("line", "checking against eager PyTorch"), ("finished", "p")]
