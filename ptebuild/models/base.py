"""What every model kind declares, and the hooks with their defaults.

A model kind is how a manifest's ``[models.NAME]`` table becomes an eager model and then programs.
The builder and the manifest never test a kind's name; they ask the kind:

In the builder (cheap: no torch, no executorch, no model code):

- :meth:`ModelKind.spec_model`: the pydantic model of the table (validated when the manifest is
  loaded; ``ptebuild schema`` shows it);
- :meth:`ModelKind.resolve`: the table as the plan's values (:class:`ResolvedModel`: the methods,
  the files the action key hashes by content, the seed...);
- :meth:`ModelKind.program_options_model`: the ``options`` a program of this kind takes for a
  backend (None: the backend's own options model);
- :meth:`ModelKind.backend_problem`: why a program of this kind cannot be lowered for a backend
  (one line), or None;
- :meth:`ModelKind.check_defaults` and :meth:`ModelKind.extra_outputs`: the tolerances of its
  programs' check and the files they write beside the ``.pte`` (published, cached, bundled with it);
- :meth:`ModelKind.program_files`: files a program's options name (hashed into its key).

In a worker (may import torch and executorch, inside the function):

- :meth:`ModelKind.build`: the whole build of one program (its model made, each method exported,
  lowered, emitted, checked, its test cases bundled, what the lowering counted), its files written
  as streams into :class:`Outputs` (the worker's: the task's content-addressed store, hashed on
  the way), given a :class:`BuildJob` and answering a :class:`BuiltProgram`: one interface for
  every kind, the framing every kind shares (a fresh module state, the stages' clock, the
  discovered dependencies) being the worker's (:func:`ptebuild.worker.execute.run_task`);
- :meth:`ModelKind.generate`: generate text with a built program (kinds that are language models).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ptebuild.backends.base import Backend, CheckTolerances
    from ptebuild.figures import CheckFigures
    from ptebuild.insight.program import ProgramInsight
    from ptebuild.plan import BuildPlan, MethodPlan, ProgramPlan

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ResolvedModel:
    """A model table resolved into the values a :class:`~ptebuild.plan.ProgramPlan` carries."""

    methods: dict[str, MethodPlan]
    """The model's methods by name (what a program may hold)."""
    seed: int = 0
    factory: str = ""
    """``package.module:callable`` of a model made by Python code; empty for kinds that make the
    model themselves (the action key then hashes no model package)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    weights: str | None = None
    """A weights file (relative to the manifest folder), hashed into the key as ``weights:``."""
    sources: tuple[str, ...] = ()
    """Globs of extra files the build depends on."""
    model_files: tuple[tuple[str, str], ...] = ()
    """``(manifest field, path)`` of other files the kind reads (hashed into the key as sources)."""


class Outputs(Protocol):
    """Where :meth:`ModelKind.build` writes a program's files, each as a stream (never whole in
    memory): the worker's go into its task's content-addressed store, hashed while written
    (:class:`ptebuild.models.factory.lower.StoredOutputs`); :class:`FolderOutputs` writes into a folder."""

    def stream(self, name: str, write: Callable[[IO[bytes]], None]) -> Path:
        """Output ``name``: what ``write(file)`` writes. Returns a path that reads it by that name."""
        ...

    def copy(self, name: str, source: Path) -> Path:
        """Output ``name``: the bytes of ``source`` (streamed). Returns a path that reads it by that name."""
        ...


class FolderOutputs:
    """:class:`Outputs` written as files into ``folder`` (tools and tests)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def stream(self, name: str, write: Callable[[IO[bytes]], None]) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / name, "wb") as out:
            write(out)
        return self.folder / name

    def copy(self, name: str, source: Path) -> Path:
        import shutil

        self.folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, self.folder / name)
        return self.folder / name


@dataclass
class BuildJob:
    """One program to build, as the worker hands it to its kind's :meth:`ModelKind.build`."""

    program: ProgramPlan
    manifest_dir: Path
    display: str
    """The manifest as messages name it."""
    outputs: Outputs
    """Where the program's files go, each streamed into the task's store (the worker's
    :class:`~ptebuild.models.factory.lower.StoredOutputs`)."""
    progress: Progress
    """A line for the build's report. The first line that begins ``checking`` begins the check's
    stage: the files stored by then are handed to the builder to copy while the check runs."""
    stages: Any
    """The task's :class:`~ptebuild.insight.stages.StageClock`: a kind says when each stage begins."""
    store: Any = None
    """The task's content-addressed store (:class:`~ptebuild.store.cas.CAS`) behind ``outputs``."""
    folder: Path | None = None
    """A scratch folder of the task's, where ``outputs`` names its files."""
    kept: Any = None
    """What this worker process kept of the model from its last task, when it is this program's
    model in the state it was built in (:mod:`ptebuild.worker.model_memo`), else None."""
    keep: Callable[[Any], Any] | None = None
    """Keep a model just built for the next task of this worker (returns what is kept)."""


@dataclass(frozen=True)
class BuiltProgram:
    """A program lowered and checked in a worker: its files, written through :class:`Outputs`."""

    files: dict[str, Path]
    """Output file name -> the path :class:`Outputs` gave it (every output, each written once)."""
    delegated: dict[str, int]
    """Method -> number of delegate calls."""
    figures: list[CheckFigures]
    """The check's figures, empty when the check is off."""
    check: str
    """The check's name (``executorch-runtime``...), empty when it is off."""
    lower_seconds: float
    check_seconds: float
    insight: ProgramInsight | None = None
    """What the worker counted in the lowered program (its delegation, mutable buffers, inputs'
    and outputs' bytes: :meth:`ptebuild.insight.program.ProgramInsight.worker_part`); None if the
    kind did not count it."""
    warnings: tuple[str, ...] = ()
    """What went wrong beside the build (figures that could not be counted), for the report."""


class ModelKind:
    """A model kind: subclass it and override the hooks; register the module in
    :data:`ptebuild.models.MODEL_KIND_MODULES`."""

    name: str = ""
    """The manifest's ``kind``."""
    generates_text: bool = False
    """True for language models: ``ptebuild run --prompt`` generates text with its programs."""
    hears: bool = False
    """True for kinds whose programs take audio: ``ptebuild run --audio FILE``."""
    no_test_cases: str | None = None
    """Set (to why) if its programs cannot write a ``.bpte`` (``bundle_io`` is then refused)."""
    no_etrecord: str | None = None
    """Set (to why) if its programs cannot write an ETRecord (``etrecord`` is then refused)."""

    # -- in the builder: cheap ------------------------------------------------------------------


    def spec_model(self) -> type[BaseModel]:
        """The pydantic model of a ``[models.NAME]`` table of this kind (frozen, unknown keys refused)."""
        raise NotImplementedError

    def resolve(self, spec: Any, *, display: str, model_name: str, manifest_dir: Path, offline: bool = False) -> ResolvedModel:
        """The validated table ``spec`` as plan values. Raises ManifestError (one located line).
        ``offline``: the manifest away from its project (a release bundle's copy): the files it
        names are not there to read."""
        raise NotImplementedError

    def program_options_model(self, backend_name: str) -> type[BaseModel] | None:
        """The model that validates a program's ``options`` and ``compile_specs`` for this backend;
        None: the backend's own (:attr:`ptebuild.backends.base.Backend.options_model`)."""
        return None

    def program_problem(self, spec: Any, backend_name: str, backend: Backend, options: Any,
                        data_name: str | None) -> tuple[str, str] | None:
        """Why a program of this kind cannot be made for ``backend`` with these options:
        ``(the program's key at fault, what is wrong and how to fix it)``, or None."""
        return None

    def check_defaults(self, backend: Backend, options: Any) -> CheckTolerances:
        """The check's tolerances for a program with these (validated) options."""
        return backend.check_defaults(options)

    def extra_outputs(self, program_name: str, resolved: ResolvedModel, options: Any) -> tuple[str, ...]:
        """Files a program with these (validated) options writes beside its ``.pte`` and its
        ``data_name``'s ``.ptd`` (published and bundled with it; a ``.ptd`` among them is one of the
        program's weights files, loaded with it)."""
        return ()

    def program_methods(self, methods: dict[str, MethodPlan], options: Any) -> dict[str, MethodPlan]:
        """The methods a program with these (validated) options may hold, by name (default: the
        model's ``methods``; an LLM program of several methods names its own)."""
        return methods

    def program_files(self, options: Any) -> tuple[tuple[str, str], ...]:
        """``(key under the program, path)`` of files a program's options name (relative to the
        manifest): checked to exist, hashed into its key by content (an LLM's LoRA adapter)."""
        return ()

    # -- in a worker ----------------------------------------------------------------------------

    def build(self, job: BuildJob) -> BuiltProgram:
        """Build ``job.program``: lower it, write its files through ``job.outputs`` and check it (if
        its check is on). A :class:`~ptebuild.errors.BuildError` says what failed, in one line."""
        raise NotImplementedError

    def generate(self, plan: BuildPlan, program: ProgramPlan, prompt: str, *, max_new_tokens: int,
                 out_dir: Path | None, audio: Path | None = None) -> Any:
        """Generate text from ``prompt`` (and ``audio``, for kinds that :attr:`hear`) with the built
        ``program`` (:attr:`generates_text` kinds)."""
        from ptebuild.errors import UsageError

        raise UsageError(f"{plan.manifest}: program {program.name!r} is not a language model ({self.name} model); "
                         "--prompt is for programs of executorch-llm models: drop --prompt")
