"""What every backend shares: what it declares about itself, and the hooks with their defaults.

A backend is a :class:`Backend` (or a subclass overriding some hooks). The builder never tests a
backend's name: it asks what the backend declares (does it need a GPU, which check does it run,
where do its weights live, are its bytes reproducible, can this machine lower and check it), and
the readers of ``.pte`` files ask its payload readers what its delegates' payloads hold.

Hooks that run in a worker (``transform_model``, ``prepare``, ``partitioners``, ``lowering_context``, ``emit_config``,
``place_weights``, ``data_files``, ``rewrite_keys``, ``check``) may import torch and executorch inside the function;
the others (``toolchain_facts``, ``can_build``, ``can_check``, ``resources``, ``check_defaults``,
``check_kind``, ``reproducible``) run in the builder and must stay cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptebuild.tolerances import Tolerance

if TYPE_CHECKING:
    from ptebuild.backends.options import BackendOptions as BackendOptions
    from ptebuild.lowering.check import OutputFigures
    from ptebuild.plan import ProgramPlan
    from ptebuild.runtime.payloads import PayloadReader

Options = Mapping[str, Any]
"""A program's ``options`` as the plan holds them (the validated model, dumped): what the
builder's cheap hooks get. The worker hooks get the validated model itself (an instance of
:attr:`Backend.options_model`, a class each backend defines when first asked: typed ``Any``)."""


def __getattr__(name: str) -> object:  # BackendOptions needs pydantic: imported only when asked for
    if name == "BackendOptions":
        from ptebuild.backends.options import BackendOptions

        return BackendOptions
    raise AttributeError(f"module 'ptebuild.backends.base' has no attribute {name!r}")


CheckTolerances = Tolerance
"""A backend's default tolerance of a float32 output (:mod:`ptebuild.tolerances` says how an
output's dtype and the manifest combine with it)."""


@dataclass(frozen=True)
class CheckKind:
    """How a backend's programs are checked before they are published."""

    name: str
    """As reported (``executorch-runtime``, ``aoti-runner-cuda``, ``windows-imports``...)."""
    numeric: bool = True
    """True: outputs compared with eager PyTorch (error figures); False: a structural check only."""
    in_executorch: bool = True
    """True: the program runs in ExecuTorch's runtime on this machine (a wrong one's first
    divergence can then be searched operator by operator: :mod:`ptebuild.models.factory.divergence`)."""


EXECUTORCH_RUNTIME = CheckKind("executorch-runtime")
"""Every method run in ExecuTorch's own runtime, against eager PyTorch."""


@dataclass(frozen=True)
class Backend:
    name: str
    options_factory: Callable[[], type[BackendOptions]]
    """Returns the backend's options model (a pydantic model: defined when first needed, so that
    the builder's cheap hooks never pay for importing pydantic). It validates the program's
    ``options`` and ``compile_specs`` tables together."""
    default_check: CheckTolerances
    keeps_data_in_pte: bool = False
    """Where its weights live: True if it cannot write a ``.ptd`` (a data name is refused)."""
    requires_data_name: bool = False
    """True if its weights always go to a ``.ptd`` (a program without a data name is refused)."""
    needs_gpu: bool = False
    """Lowering needs a GPU: a machine without one restores its programs or reports them
    ``needs-gpu``; schedulers give its tasks a GPU."""
    forks_safely: bool = True
    """False if a worker forked from a warm process that imported torch cannot lower or check
    this backend's programs (the warm server then starts a fresh interpreter for them)."""
    toolchain_from_files: bool = True
    """True if :meth:`toolchain_facts` reads only files (versions from dist-info folders): a
    no-op stamp's file stats then stand for them. False: a device query (a GPU's architecture)."""
    shim_library_name: str | None = None
    """The import library its Windows programs link (the manifest's shim target must be named so)."""
    static_shapes: str | None = None
    """Set (to why) if its programs cannot take dynamic dims: a program whose methods have any is
    refused when the manifest is read."""
    distinct_outputs: str | None = None
    """Set (to why) if its runtime needs every output slot to hold its own tensor: the method
    wrapper then clones a tensor returned in several slots before export, and a program whose
    exported graph still shares one is refused."""
    contiguous_outputs: str | None = None
    """Set (to why) if its runtime mishandles a strided output: the wrapper makes outputs contiguous."""
    checked_with: str = "torch 2.13.0 (CPU) with executorch 1.5.1"
    """The toolchain its check was seen working with: what a machine that cannot check it is
    pointed to (ExecuTorch 1.5.1's pip runtime fails under torch 2.11.0+cu130)."""
    same_bytes_on_every_platform: bool = False
    """True if a program's bytes do not depend on the platform it is lowered on (the key's
    ``toolchain.platform``): a lock written on one platform then holds on another. The cache
    still keys by platform: what is shared across platforms is the lock, not the entries."""
    payload_readers: tuple[PayloadReader, ...] = ()
    """What ptebuild reads of the payloads of the delegates it writes: one
    :class:`~ptebuild.runtime.payloads.PayloadReader` per delegate id (``XnnpackBackend``), found
    by ``inspect``, ``verify``, the loader and the structural checks through the registry (no
    reader: its delegates are opaque, their keys cannot be listed). Pure Python, cheap to import."""

    @property
    def delegate_ids(self) -> tuple[str, ...]:
        """The ids its delegates carry in a ``.pte`` (``BackendDelegate.id``)."""
        return tuple(reader.delegate_id for reader in self.payload_readers)

    @property
    def options_model(self) -> type[BackendOptions]:
        model = self.options_factory()
        return model

    def program_options(self, program: ProgramPlan) -> Any:
        """``program``'s options, typed: its plan's binding's (made once, by the options model its
        model kind gives, :class:`ptebuild.backends.BoundBackend`) where it is bound to this
        backend with these options, else validated by this backend's own model. For a worker hook
        that has the program but not its options."""
        bound: Any = program.bound  # a BoundBackend (plan.py cannot name the backends' types)
        if bound is not None and bound.name == self.name and bound.source is program.options:
            return bound.options
        return self.options_model.model_validate(dict(program.options))

    def check_defaults(self, options: Any) -> CheckTolerances:
        """The tolerances for a program with these options (quantized programs need looser ones)."""
        return self.default_check

    # -- in the builder: cheap, no torch -------------------------------------------------------

    def toolchain_facts(self, options: Options) -> dict[str, str]:
        """Extra facts for the action key (``toolchain.<name>`` -> value): what changes this
        backend's code beyond Python, torch and executorch (CUDA and Triton versions, GPU arch)."""
        return {}

    def can_build(self, options: Options | None = None) -> str | None:
        """None if this machine can lower programs for the backend (with these options, a dict),
        else why not (one line)."""
        return None

    def can_check(self, options: Options | None = None) -> str | None:
        """None if this machine can run the backend's check on its programs, else why not."""
        return None

    def calibrates(self, options: Any) -> bool:
        """True if programs with these options are quantized with calibration inputs (static
        quantization): the methods' samples calibrate them, and the check's generated inputs are
        drawn within the samples' ranges."""
        return False

    def workarounds(self, options: Options, program: ProgramPlan) -> dict[str, str]:
        """Fixes of known faults of the pinned toolchain this backend applies to ``program``: name ->
        what and why (one sentence). Cheap (no torch): the key names them, the build record states
        them, and the worker's hooks apply them."""
        return {}

    def check_kind(self, options: Options | None = None) -> CheckKind:
        """The check its programs (with these options) pass before they are published."""
        return EXECUTORCH_RUNTIME

    def reproducible(self, options: Options | None = None) -> bool:
        """True if two builds of one program (same inputs, same toolchain) give the same bytes."""
        return True

    def code_in_named_data(self, key: str) -> bool:
        """True if the ``.pte``'s named data entry ``key`` is code, not a weight (a compiled
        library): it belongs inside the ``.pte`` even with a data name (default: none is)."""
        return False

    def resources(self, options: Options) -> dict[str, Any]:
        """What a task of this backend asks a scheduler for (``{"num_gpus": 1}``)."""
        return {"num_gpus": 1} if self.needs_gpu else {}

    def lowering_weight(self, options: Options) -> float:
        """How long lowering a program takes, against a portable program of the same model: a
        scheduling hint where no earlier build says (the longest work starts first, so that
        jobs in parallel end together), never a matter of correctness."""
        return 1.0

    # -- in a worker: may import torch and executorch -------------------------------------------

    def probe_here(self) -> tuple[str | None, str | None] | None:
        """What this interpreter can do, when the backend knows without lowering: ``(why it cannot
        lower, why it cannot check)``, each None when it can. None (the default): find out by
        lowering and checking the smallest real program (:mod:`ptebuild.worker.probe`)."""
        return None

    def transform_model(self, model: Any, options: Any, program: ProgramPlan) -> Any:
        """The eager model the program's methods are exported from (default: ``model`` itself).

        For backends that rewrite modules before export (torchao's ``quantize_`` swaps the
        weights of ``nn.Linear`` modules, which an exported graph no longer has). ``model`` is
        left as it is (return a changed copy): :meth:`check` compares with it. A module that
        cannot be transformed raises a located :class:`~ptebuild.errors.BuildError`.
        """
        return model

    def transform_notes(self, model: Any) -> list[str]:
        """What :meth:`transform_model` left as it was in the copy it returned (the build's
        warnings: a linear kept float). Default: nothing."""
        return []

    def prepare(
        self,
        exported_program: Any,
        data_name: str | None,
        options: Any,
        export: Callable[[Any], Any],
        calibration: list[tuple[Any, ...]],
    ) -> Any:
        """Return the exported program to lower (default: unchanged).

        ``export(module)`` exports ``module`` again with the method's example inputs and dynamic
        shapes, for backends that rewrite or tag the unlifted graph; ``calibration`` is a list of
        input tuples for backends that quantize.
        """
        return exported_program

    def partitioners(self, options: Any, program: ProgramPlan | None = None) -> list[Any]:
        """The partitioners for ``to_edge_transform_and_lower`` (``program`` gives method names)."""
        return []

    def fallback_partitioners(self, error: BaseException, options: Any, program: ProgramPlan) -> tuple[list[Any], str] | None:
        """After ``error`` from lowering with :meth:`partitioners`: the partitioners to lower again
        with, when ``error`` is a known refusal that narrower partitions avoid, and the build's
        warning that says so; None (the default): the failure stands."""
        return None

    def lowering_context(self, options: Any) -> AbstractContextManager[object]:
        """A context the lowering runs in (partitioning, the delegate's compile, emitting): for
        backends that set compiler configuration for the duration (default: none)."""
        return nullcontext()

    def emit_config(self, data_name: str | None, options: Any) -> Any:
        """The ``ExecutorchBackendConfig`` for ``to_executorch``: weights into ``data_name``."""
        from executorch.exir import ExecutorchBackendConfig

        return ExecutorchBackendConfig(external_constants=(lambda _node: data_name) if data_name else False)

    def data_files(self, manager: Any, data_name: str | None, program_name: str) -> dict[str, Any]:
        """The data files a lowering wrote, by the ``.ptd`` stem they are published as.

        ``manager._tensor_data`` maps file stems to Cords; by default every weight went into
        ``data_name`` (or nowhere). Backends whose delegate names its own file rename it here.
        """
        from ptebuild.errors import REPORT, BuildError

        data = dict(manager._tensor_data or {})
        if data_name is None:
            if data:
                raise BuildError(
                    f"lowering wrote data files {sorted(data)} with no data_name; set data_name", location=f"programs.{program_name}"
                )
            return {}
        unexpected = sorted(set(data) - {data_name})
        if unexpected:
            raise BuildError(
                f"lowering wrote data files {unexpected} besides {data_name!r}; {REPORT}", location=f"programs.{program_name}"
            )
        if data_name not in data:
            raise BuildError(f"lowering wrote no weights into '{data_name}.ptd'; {REPORT}", location=f"programs.{program_name}")
        return {data_name: data[data_name]}

    def place_weights(self, manager: Any, config: Any, data_name: str) -> None:
        """Move into ``<data_name>.ptd`` the weights the lowering left inside the ``.pte`` that this
        backend's runtime also finds in a ``.ptd`` (default: none; called right after
        ``to_executorch``, before :meth:`rewrite_keys`). Weights still inside afterwards are named
        in the report and the record (:mod:`ptebuild.runtime.weights_in_pte`)."""

    def rewrite_keys(self, manager: Any, config: Any) -> None:
        """Key the program's external weights by SHA-256 (default: portable constants)."""
        from ptebuild.lowering import weightkeys

        weightkeys.key_constants_by_sha256(manager, config)

    def warm(self) -> None:
        """Work that every lowering for this backend repeats in a fresh process (upstream's
        per-process caches), done once by the warm worker server before it forks its task
        children, which then start from it. The server runs it with torch on one thread and
        tqdm's monitor thread off (:func:`ptebuild.daemon.children.warm_before_forking`): it must
        start no thread of its own, since the server forks over it. Default: nothing."""

    def ready_runtime(self) -> None:
        """Make this process's ExecuTorch runtime able to load the backend's programs (a library it
        opens, found here): called by :meth:`check` and by any other check that loads a program of
        it (a language model's generation check). Default: nothing to do."""

    def reference_model(self, model: Any, program: ProgramPlan) -> Any:
        """The eager model whose outputs the check's ``atol`` and ``min_cosine`` bound (default:
        ``model``): what :meth:`check` compares with, and whose outputs a ``.bpte`` bundles
        (:mod:`ptebuild.lowering.bundled_io`), so that a device verifies the program against
        what it was checked against."""
        return model

    def check(self, model: Any, program: ProgramPlan, pte: Path, ptd: Path | None,
              samples: Mapping[str, list[tuple[Any, ...]]] | None = None) -> tuple[list[OutputFigures], str]:
        """Run the built program against eager PyTorch; return (figures, name of the check).

        ``samples``: method name -> its samples (:mod:`ptebuild.lowering.samples`), checked beside
        the generated inputs by every check that runs the program."""
        from ptebuild.lowering.check import check_program

        return check_program(model, program, pte, ptd, samples=dict(samples or {})), self.check_kind(program.options).name
