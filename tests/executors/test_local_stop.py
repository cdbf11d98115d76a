"""A local worker asked to stop exits at once, without Python's teardown of what it imported.

The teardown of a worker that imported torch and executorch and lowered a program takes about a
second (freeing every module and object), and a build waited for it at its end. A model's own
objects may take longer still to free; nothing in them is the build's to wait for.
"""

from __future__ import annotations

import sys
from pathlib import Path

from project_copy import copy_project

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tasks_for_tests import make_tasks, run_all

from ptebuild.builder.executors.local import LocalExecutor
from ptebuild.worker.tasks import EventKind

SLOW_TO_FREE = '''
import sys as _sys
import time as _time


class _SlowToFree:
    """Freed at the interpreter's teardown, which it makes last a minute."""

    def __del__(self, sleep=_time.sleep):  # bound now: the module's names are gone by then
        sleep(60)


_sys.ptebuild_test_slow_to_free = _SlowToFree()  # held by the interpreter until its teardown
'''


def test_a_stopped_worker_exits_without_the_teardown(tmp_path):
    manifest = copy_project(tmp_path / "project")
    model = manifest.parent / "tinymodels" / "tiny.py"
    model.write_text(model.read_text() + SLOW_TO_FREE)
    pool = LocalExecutor(jobs=1)
    try:
        task = make_tasks(manifest, tmp_path / "store")["tiny_portable"]
        final = run_all(pool, {task.task_id: task})[task.task_id]
        assert final.kind is EventKind.DONE, final.text
        (worker,) = pool._workers  # the process, to read its exit below
        process = worker.process
    finally:
        pool.close()
    # Before: the stop waited 5 s for the teardown, then killed the worker (exit code -9).
    assert process.exitcode == 0
