"""The local pool's protocol, as its parent reads it from a worker's pipe (a real pipe; the
worker here is a process that only waits: what a real worker sends is the executors' tests')."""

from __future__ import annotations

import multiprocessing

from ptebuild.builder.executors.local import LocalExecutor, _Worker
from ptebuild.results import OutputFile
from ptebuild.worker.tasks import EventKind, TaskResult

OUTPUTS = (OutputFile("p.pte", "a" * 64, 10), OutputFile("p.ptd", "b" * 64, 20))


def test_stored_outputs_become_an_event_before_the_result():
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=multiprocessing.connection.wait, args=([], 30), daemon=True)
    process.start()
    pool = LocalExecutor(jobs=1)
    worker = _Worker(process=process, conn=parent, log_path="", task_id="p", ready=True)
    pool._workers.append(worker)
    try:
        child.send(("stored", [o.to_json() for o in OUTPUTS]))
        child.send(("stored", "not outputs"))  # dropped: the news is only a head start
        child.send(("done", TaskResult(outputs=OUTPUTS)))
        events = pool._drain(worker)
    finally:
        process.kill()
        process.join()
    assert [(e.kind, e.outputs) for e in events] == [(EventKind.STORED, OUTPUTS), (EventKind.DONE, ())]
    assert events[1].result is not None and events[1].result.outputs == OUTPUTS
