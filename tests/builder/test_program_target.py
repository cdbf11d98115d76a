"""A program's life in one build (:mod:`ptebuild.builder.program_target`), held to what the build
loop relies on: the task it hands an executor, and what it does with each outcome: outputs that
are the program's and in the build's store stored, cached and published (copied ahead while the
check runs); anything else a failure with one line naming the program, its whole text in the
program's log; a full cache retried into the build's own store; a node's result that cannot be
fetched run again; what this machine cannot build reported before anything is lowered.

Real plans (the tiny project), stores, caches and output folders; the outcomes are the events an
executor sends, made here (the executors' own tests carry them from real workers). The probe's
verdict is written as its file would read (as ``tests/builder/test_capabilities.py`` does): the
probe itself takes ten seconds.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from project_copy import copy_project

from ptebuild.builder import capabilities
from ptebuild.builder.capabilities import Capabilities, Verdict
from ptebuild.builder.context import BuildContext, BuildOptions
from ptebuild.builder.program_target import ProgramTarget, method_specs
from ptebuild.builder.publish import Publisher
from ptebuild.builder.schedule import AGAIN
from ptebuild.hashing import hash_file
from ptebuild.insight.stages import Stage, StageSpan
from ptebuild.manifest import load_manifest
from ptebuild.results import ActionResult, FailureKind, OutputFile, Status
from ptebuild.store.frontend import Cache
from ptebuild.worker.tasks import Event, EventKind, TaskFailure, TaskResult

OUTPUTS = ("tiny_portable.pte", "tiny_portable_weights.ptd")


class Build:
    """One build of the tiny project: its context, publisher and what it reported (its cache's
    warnings in :attr:`warnings` when it made the cache)."""

    def __init__(self, manifest: Path, out: Path, cache: Cache | Path | None, **options) -> None:
        self.plan = load_manifest(str(manifest))
        self.reports: list[tuple[str, str, str]] = []
        self.warnings: list[str] = []
        if isinstance(cache, Path):
            cache = Cache.for_folder(cache, warn=self.warnings.append)
        out.mkdir(parents=True, exist_ok=True)
        self.context = BuildContext(self.plan, BuildOptions(out_dir=out, cache=cache, **options),
                                    lambda *event: self.reports.append(event))
        self.publisher = Publisher(self.context)

    @property
    def out(self) -> Path:
        return self.context.folder.path

    def target(self, name: str = "tiny_portable") -> ProgramTarget:
        program = next(p for p in self.plan.programs if p.name == name)
        ProgramTarget.new_result(self.context, program)
        return ProgramTarget(self.context, self.publisher, program)

    def stored(self, *names: str) -> tuple[OutputFile, ...]:
        """Files of these names, in the build's store as a worker leaves them."""
        store = self.context.store()
        outputs = []
        for name in names:
            made = self.out.parent / "made" / name
            made.parent.mkdir(exist_ok=True)
            made.write_bytes(f"the bytes of {name}".encode())
            outputs.append(OutputFile(name, *store.put_file(made)))
        return tuple(outputs)

    def ahead(self) -> list[str]:
        """The folders of files copied ahead into the staging area."""
        return sorted(p.name.split(".")[0] for p in self.out.glob(".ptebuild-staging/*/*.ahead.*"))


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """The tiny project; the probe's verdicts of this toolchain kept in a folder of the test's own."""
    monkeypatch.setenv(capabilities.DIR_ENV, str(tmp_path / "capabilities"))
    return copy_project(tmp_path / "project")


@pytest.fixture
def build(project, tmp_path) -> Build:
    """A build with a cache, on this machine's executor, whose probe found portable works."""
    Capabilities(None, hash_file)._write({"portable": Verdict()})
    return Build(project, tmp_path / "out", tmp_path / "cache")


def done(target: ProgramTarget, result: TaskResult):
    return target.finished(Event(target.name, EventKind.DONE, result=result))


def failed(target: ProgramTarget, failure: TaskFailure):
    return target.finished(Event.failed(target.name, failure))


# -- before it is lowered --------------------------------------------------------------------------


def test_its_result_is_pending_and_names_its_methods_as_the_manifest_declares_them(build):
    target = build.target()
    result = build.context.results["tiny_portable"]
    assert target.result is result and (result.status, result.kind, result.backend) == (Status.PENDING, "program", "portable")
    assert result.out_dir == str(build.out) and result.key == target.key != ""
    assert method_specs(target.program) == result.methods == (
        {"name": "forward", "inputs": [{"name": "x", "shape": ["batch", 6], "dtype": "float32"}],
         "dims": [{"name": "batch", "min": 1, "max": 4}]},
        {"name": "score", "inputs": [{"name": "x", "shape": ["batch", 6], "dtype": "float32"},
                                     {"name": "tokens", "shape": ["batch"], "dtype": "int64"},
                                     {"name": "mask", "shape": ["batch"], "dtype": "bool"}],
         "dims": [{"name": "batch", "min": 1, "max": 4}]},
    )


def test_its_task_carries_the_plan_the_files_by_digest_and_the_builds_store(build, project):
    target = build.target()
    task = target.make_task()
    assert (task.task_id, task.key, task.plan, task.manifest) == ("tiny_portable", target.key, target.program, build.plan.manifest)
    assert task.manifest_dir == str(project.parent) and task.store == str(build.context.store().root)
    assert task.inputs == target.inputs and not task.debug and not task.node_cache
    sources = {f.name: f.sha256 for f in task.files}
    assert sources["tinymodels/tiny.py"] == hashlib.sha256((project.parent / "tinymodels" / "tiny.py").read_bytes()).hexdigest()


def test_its_key_changes_with_its_models_code(build, project, tmp_path):
    before = build.target().key
    model = project.parent / "tinymodels" / "tiny.py"
    model.write_text(model.read_text() + "\n# edited\n")
    assert Build(project, tmp_path / "out2", None).target().key != before


def test_what_this_machine_cannot_check_is_reported_before_anything_is_lowered(project, tmp_path):
    Capabilities(None, hash_file)._write({"portable": Verdict(check="RuntimeError: no runtime here")})
    target = Build(project, tmp_path / "out", None).target()
    obstacle = target.obstacle()
    assert obstacle is not None and obstacle.status is Status.CANNOT_CHECK
    target.blocked(obstacle)
    assert target.result.status is Status.CANNOT_CHECK
    assert target.result.message == (
        f"{project}: programs.tiny_portable: not in the cache, and this machine cannot run its check (executorch-runtime): "
        f"RuntimeError: no runtime here; {obstacle.way_out}")
    # Built by an executor of other machines, this machine's verdict is not the program's.
    assert Build(project, tmp_path / "out", None, executor="ray").target().obstacle() is None


def test_the_expected_times_are_those_of_its_last_build_in_this_cache(build, project, tmp_path):
    target = build.target()
    assert target.expected_seconds() is None and target.expected_stage("lowering") is None
    spans = (StageSpan(Stage.EXPORT, 0.0, 2.0), StageSpan(Stage.LOWER, 2.0, 7.5))
    made = tmp_path / "last.pte"
    made.write_bytes(b"the last build's")
    last = ActionResult(key="1" * 64, target="tiny_portable", kind="program", outputs=(OutputFile(made.name, *hash_file(made)),),
                        lower_seconds=12.5, stages=spans)
    build.context.cache.save(last, {made.name: made})
    build.context.remember("tiny_portable", last.key)
    target = Build(project, tmp_path / "out", build.context.cache).target()
    assert target.expected_seconds() == 12.5
    assert target.expected_stage("lowering") == 5.5 and target.expected_stage("export") == 2.0
    assert target.expected_stage("checking") is None and target.expected_stage("no such stage") is None


# -- its outcome -----------------------------------------------------------------------------------


def test_its_outputs_are_copied_ahead_while_it_is_checked_then_published_and_cached(build, project, tmp_path):
    target = build.target()
    outputs = build.stored(*OUTPUTS)
    target.stored(outputs)
    assert build.ahead() == ["tiny_portable"]
    assert done(target, TaskResult(outputs=outputs, warnings=("a weight stayed in the .pte",))) is True
    assert target.result.status is Status.BUILT and target.result.outputs == outputs
    for output in outputs:
        assert (build.out / output.name).read_bytes() == f"the bytes of {output.name}".encode()
    assert build.ahead() == []
    assert build.reports == [("tiny_portable", "warning", "a weight stayed in the .pte"), ("tiny_portable", "done", "built")]

    again = Build(project, tmp_path / "out-again", build.context.cache).target()
    assert again.ready() is True  # as another process finds it, after the lock it waited for
    assert again.result.status is Status.CACHED and again.result.seconds == 0.0
    assert (tmp_path / "out-again" / "tiny_portable.pte").read_bytes() == b"the bytes of tiny_portable.pte"


@pytest.mark.parametrize("names", [("tiny_portable.pte",), ("tiny_portable.pte", "tiny_portable_weights.ptd", "other.ptd")],
                         ids=["one-missing", "one-foreign"])
def test_outputs_that_are_not_the_programs_fail_it_and_nothing_is_published(build, names):
    target = build.target()
    outputs = build.stored(*names)
    target.stored(outputs)
    assert done(target, TaskResult(outputs=outputs)) is False
    assert target.result.status is Status.FAILED
    assert target.result.message == (
        f"{build.plan.manifest}: programs.tiny_portable: the worker produced {sorted(names)}, expected {list(OUTPUTS)}")
    assert build.ahead() == [] and not any(build.out.glob("*.pt[ed]"))


def test_only_the_programs_own_outputs_in_the_builds_store_are_copied_ahead(build, tmp_path):
    target = build.target()
    target.stored(build.stored("tiny_portable.pte", "other.ptd"))  # a name it does not write
    assert build.ahead() == []
    elsewhere = OutputFile("tiny_portable.pte", "0" * 64, 5)  # in a node's store, not the build's
    target.stored((elsewhere,))
    assert build.ahead() == []
    target.stored(build.stored("tiny_portable.pte"))  # what is there so far
    assert build.ahead() == ["tiny_portable"]


def test_outputs_not_in_the_builds_store_fail_the_program(build):
    target = build.target()
    outputs = build.stored(*OUTPUTS)
    lost = outputs[0]
    build.context.store().path(lost.sha256).unlink()
    assert done(target, TaskResult(outputs=outputs)) is False
    assert target.result.message == (
        f"{build.plan.manifest}: programs.tiny_portable: tiny_portable.pte is not in the build's store as the worker "
        f"named it ({lost.sha256[:12]}..., {lost.size} bytes)")


def test_a_failure_is_one_line_and_its_whole_text_goes_to_the_programs_log(build):
    target = build.target()
    target.stored(build.stored(*OUTPUTS))  # copied ahead, then refused
    traceback = "Traceback (most recent call last):\n  ...\nRuntimeError: broken on purpose"
    going_on = failed(target, TaskFailure(FailureKind.BUILD, "RuntimeError: broken on purpose", detail=traceback))
    assert going_on is False
    log = build.out / ".ptebuild" / "logs" / "tiny_portable.log"
    line = f"{build.plan.manifest}: programs.tiny_portable: RuntimeError: broken on purpose"
    assert target.result.message == f"{line} (full output: {log})"
    assert (target.result.status, target.result.failure) == (Status.FAILED, FailureKind.BUILD)
    assert log.read_text() == f"{line}\n\n{traceback}\n"
    assert build.ahead() == [] and not any(build.out.glob("*.pt[ed]"))
    assert build.reports[-1] == ("tiny_portable", "done", "failed")


def test_a_program_failing_after_the_probe_found_the_check_cannot_run_here_gets_the_same_status(project, tmp_path):
    """Seen on the GPU host: programs stopped by one cause (ExecuTorch's runtime under another torch)
    were 4 'failed' and 2 'cannot-check': those that failed after another's failure had the probe
    find the verdict were reported failed. With the verdict known, each gets the verdict's status."""
    Capabilities(None, hash_file)._write({"portable": Verdict(check="RuntimeError: tensor does not have a device")})
    target = Build(project, tmp_path / "out", None, keep_going=True).target()
    failed(target, TaskFailure(FailureKind.BUILD, "checking failed: RuntimeError: tensor does not have a device"))
    assert target.result.status is Status.CANNOT_CHECK
    assert "this machine cannot run its check (executorch-runtime): RuntimeError: tensor does not have a device" in target.result.message


def test_with_keep_going_the_build_goes_on_after_a_failure(project, tmp_path):
    Capabilities(None, hash_file)._write({"portable": Verdict()})
    target = Build(project, tmp_path / "out", None, keep_going=True).target()
    assert failed(target, TaskFailure(FailureKind.BUILD, "RuntimeError: broken")) is True
    assert target.result.status is Status.FAILED


def test_a_manifest_mistake_is_its_own_line_with_no_log_unless_an_exception_caused_it(build):
    target = build.target()
    mistake = f"{build.plan.manifest}: models.tiny.methods.forward: no parameter 'y'"
    failed(target, TaskFailure(FailureKind.MANIFEST, mistake, detail="ManifestError: no parameter 'y'"))
    assert target.result.message == mistake and target.result.failure is FailureKind.MANIFEST
    assert not (build.out / ".ptebuild").exists()

    target = build.target()
    caused = ("ModuleNotFoundError: No module named 'tinymodels.gone'\n\nThe above exception was the direct cause of "
              "the following exception:\n\nManifestError: ...")
    failed(target, TaskFailure(FailureKind.MANIFEST, mistake, detail=caused))
    log = build.out / ".ptebuild" / "logs" / "tiny_portable.log"
    assert target.result.message == f"{mistake} (full output: {log})" and "tinymodels.gone" in log.read_text()


def test_a_cache_that_cannot_be_written_is_left_for_the_builds_own_store(build):
    target = build.target()
    cache_store = build.context.store().root
    outcome = failed(target, TaskFailure(FailureKind.STORE, "cannot write into the cache: No space left on device"))
    assert outcome == AGAIN and target.result.status is Status.PENDING
    assert build.warnings == [f"local cache {cache_store.parent} disabled for this build: cannot write into the cache: "
                              "No space left on device"]
    store = Path(target.make_task().store)
    assert store != cache_store and (build.out / ".ptebuild-staging") in store.parents
    # The next time, nothing else is left to try: the program fails.
    assert failed(target, TaskFailure(FailureKind.STORE, "cannot write: No space left on device")) is False
    assert target.result.status is Status.FAILED


# -- a node's result, in the shared cache -----------------------------------------------------------


def test_a_nodes_result_that_cannot_be_fetched_runs_the_task_again_into_the_builds_store(build):
    """A node stored the program in the shared cache, and this machine cannot reach it (no remote
    tier here): the task runs again, its outputs sent to the build's store this time."""
    target = build.target()
    outputs = build.stored(*OUTPUTS)
    action = ActionResult(key=target.key, target=target.name, kind="program", outputs=outputs, inputs=target.inputs,
                          backend="portable", built_on="node-7")
    assert done(target, TaskResult(outputs=outputs, node="node-7", action=action.to_json())) == AGAIN
    assert target.result.status is Status.PENDING and not any(build.out.glob("*.pt[ed]"))
    assert not target.make_task().node_cache
