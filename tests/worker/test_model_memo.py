"""A worker builds a model and exports each method once for several programs of it, and only
while the model is unchanged: the programs' bytes are those of a worker that built each alone."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from project_copy import copy_project

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "executors"))
from tasks_for_tests import make_tasks

from ptebuild.worker import model_memo
from ptebuild.worker.execute import prepare_worker, run_task

STATEFUL = '''

class Counting(Tiny):
    """Its forward counts its calls in a buffer, in place: its state changes when it runs."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        self.calls.add_(1)
        return super().forward(x)


def make_counting(**kwargs):
    return Counting(**kwargs)
'''


@pytest.fixture(scope="module")
def worker():
    # The test projects' model modules, imported in this process by earlier tests, would count as
    # the worker's own (imported before it started) and outlive every task.
    for name in [n for n in sys.modules if n.partition(".")[0] == "tinymodels"]:
        del sys.modules[name]
    prepare_worker()
    yield
    model_memo.drop()


def run(task) -> tuple[dict[str, str], list[str]]:
    said: list[str] = []
    result = run_task(task, said.append)
    return {o.name: o.sha256 for o in result.outputs}, said


def test_two_programs_of_one_model_build_and_export_it_once(worker, tmp_path):
    manifest = copy_project(tmp_path / "project")
    tasks = make_tasks(manifest, tmp_path / "store")
    model_memo.drop()
    xnnpack, first = run(tasks["tiny_xnnpack"])
    portable, second = run(tasks["tiny_portable"])
    assert "building the model" in first and "building the model" not in second, second
    assert [s for s in second if "exported already" in s] == [
        "forward: exported already, for another program of this model", "score: exported already, for another program of this model"]
    model_memo.drop()  # as a worker that never built it
    alone, third = run(tasks["tiny_portable"])
    assert "building the model" in third and alone == portable
    again, fourth = run(tasks["tiny_xnnpack"])  # now from the exports the portable program made
    assert "building the model" not in fourth and again == xnnpack


def test_a_model_whose_state_changed_is_built_again(worker, tmp_path):
    manifest = copy_project(tmp_path / "project")
    model = manifest.parent / "tinymodels" / "tiny.py"
    model.write_text(model.read_text() + STATEFUL)
    manifest.write_text(manifest.read_text().replace("tinymodels.tiny:make_tiny", "tinymodels.tiny:make_counting"))
    tasks = make_tasks(manifest, tmp_path / "store")
    model_memo.drop()
    _, first = run(tasks["tiny_portable"])  # its check ran the eager model: its buffer counted
    _, second = run(tasks["tiny_xnnpack"])
    assert "building the model" in first and "building the model" in second, second
    assert not [s for s in second if "exported already" in s]


# Slow: a third worker task (11 s); test_a_model_whose_state_changed_is_built_again keeps the memo's staleness guard in the default run.
@pytest.mark.slow
def test_a_task_of_another_model_drops_the_kept_one(worker, tmp_path):
    one = copy_project(tmp_path / "one")
    other = copy_project(tmp_path / "other")
    other.write_text(other.read_text().replace("width = 16", "width = 8"))
    model_memo.drop()
    run(make_tasks(one, tmp_path / "store")["tiny_portable"])
    _, said = run(make_tasks(other, tmp_path / "store")["tiny_portable"])
    assert "building the model" in said
    _, again = run(make_tasks(one, tmp_path / "store")["tiny_xnnpack"])
    assert "building the model" in again  # one model at a time: the first was dropped
