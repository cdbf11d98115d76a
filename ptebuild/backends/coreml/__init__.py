"""The Core ML backend: ExecuTorch 1.5.1's ``CoreMLPartitioner``/``CoreMLBackend``, for Apple devices.

Lowering is ExecuTorch's, with coremltools 9.0 (an ExecuTorch dependency on Linux x86-64): the
partitioner tags what coremltools converts, and the delegate's ``preprocess`` converts each
partition to an ML program, saves it as an ``.mlpackage`` and flattens that folder into the
payload (:mod:`ptebuild.runtime.payload_readers.coreml` reads it). Compile specs and their defaults:
:mod:`.options`.

**Weights** live inside the delegate (the ``.mlpackage``'s ``weights/weight.bin``), or, for a
multifunction model, in the ``.pte``'s named data: ExecuTorch writes no ``.ptd`` for Core ML
(``external_constants`` leaves the delegate's weights where they are), so a data name is
refused when the manifest is read (``keeps_data_in_pte``). Keeping the weights out of Core ML
(``take_over_constant_data = False``) would make them model inputs that a ``.ptd`` feeds at run
time, slower on device and never checked on one here: not offered.

**Reproducible bytes**: upstream's payloads differ between two exports of one model (a random
identifier, random ``Manifest.json`` keys, the protobuf's map order, the conversion date);
:mod:`.determinism` fixes each during the lowering, the identifier derived from the model's
content, and restores ExecuTorch's and coremltools' code when the lowering ends. Dynamic dims
keep the range torch.export gave them (:mod:`.ranges`: ExecuTorch narrows ``min = 1`` to 2, and
the model would refuse a batch of 1 on the device).

**The check** is structural (``coreml-structural``, :mod:`.check`): no Core ML runtime exists
here, so the delegate's model is read back with coremltools and matched to the method.

**This machine**: :meth:`CoreMLBackend.can_build` needs coremltools and ExecuTorch's Core ML
backend (its ``executorchcoreml`` extension flattens the payload), found without importing
either; ``model_type = "compiled_model"`` needs macOS (coremltools compiles an ``.mlmodelc``
through Apple's Core ML framework only).
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ptebuild.backends.base import Backend, CheckKind, CheckTolerances
from ptebuild.backends.coreml import options as coreml_options
from ptebuild.backends.coreml.check import STRUCTURAL
from ptebuild.runtime.payload_readers.coreml import READERS as PAYLOAD_READERS

COMPILED_MODEL_NEEDS_MACOS = (
    "model_type 'compiled_model' needs macOS: coremltools compiles an .mlmodelc only through Apple's Core ML "
    "framework (here it fails with 'This model was not loaded or compiled with the Core ML Framework'); use "
    "model_type = 'model', which the device compiles on first load"
)
_EXECUTORCH_COREML = ("backends", "apple", "coreml")


@functools.cache
def _dist_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


@functools.cache
def missing_parts() -> str | None:
    """What this environment lacks to lower Core ML programs (found without importing), or None."""
    try:
        coremltools = importlib.util.find_spec("coremltools")
        executorch = importlib.util.find_spec("executorch")
    except (ImportError, ValueError):
        coremltools = executorch = None
    if coremltools is None:
        return "coremltools is not installed (pip install coremltools==9.0; ExecuTorch installs it on Linux x86-64 and macOS)"
    folders = [Path(p, *_EXECUTORCH_COREML) for p in (executorch.submodule_search_locations or [])] if executorch else []
    folder = next((f for f in folders if (f / "partition" / "coreml_partitioner.py").is_file()), None)
    if folder is None:
        return "this executorch has no Core ML backend (executorch.backends.apple.coreml)"
    if not any(folder.glob("executorchcoreml*")):
        return f"this executorch's Core ML backend lacks its executorchcoreml extension for {sys.platform} (it flattens the model into the payload)"
    return None


@dataclass(frozen=True)
class CoreMLBackend(Backend):
    keeps_data_in_pte: bool = True
    """The weights are inside the delegate's model (or the .pte's named data): ExecuTorch writes no .ptd."""

    def toolchain_facts(self, options) -> dict[str, str]:
        """coremltools' version: its converter and serializer decide the model's bytes."""
        return {"coreml.coremltools": _dist_version("coremltools")}

    def can_build(self, options=None) -> str | None:
        missing = missing_parts()
        if missing is not None:
            return missing
        if coreml_options.get(options, "model_type") == "compiled_model" and sys.platform != "darwin":
            return COMPILED_MODEL_NEEDS_MACOS
        return None

    def can_check(self, options=None) -> str | None:
        """The structural check reads the model back with coremltools: the same needs as lowering."""
        return self.can_build(options)

    def check_kind(self, options=None) -> CheckKind:
        return STRUCTURAL

    def reproducible(self, options=None) -> bool:
        """An ``.mlpackage`` is normalised (:mod:`.determinism`); a compiled ``.mlmodelc`` is Apple's."""
        return coreml_options.get(options, "model_type") != "compiled_model"

    # -- in a worker ----------------------------------------------------------------------------

    def prepare(self, exported_program, data_name, options, export, calibration):
        """Dynamic dims keep torch.export's range (:mod:`.ranges`)."""
        from ptebuild.backends.coreml import ranges

        ranges.keep_declared_ranges(exported_program)
        return exported_program

    def partitioners(self, options, program=None) -> list:
        from executorch.backends.apple.coreml.partition import CoreMLPartitioner

        return [CoreMLPartitioner(
            compile_specs=compile_specs(options),
            lower_full_graph=options.lower_full_graph,
            skip_ops_for_coreml_delegation=list(options.skip_operators) or None,
        )]

    def lowering_context(self, options):
        """Normalised payloads (:func:`.determinism.reproducible_payloads`) and dynamic dims whose
        range is not narrowed (:func:`.ranges.sizes_stay_oblivious`) while lowering."""
        return _lowering()

    def check(self, model, program, pte: Path, ptd: Path | None, samples=None) -> tuple[list, str]:
        from ptebuild.backends.coreml.check import check_program

        return check_program(model, program, pte, ptd), STRUCTURAL.name


@contextmanager
def _lowering() -> Iterator[None]:
    from ptebuild.backends.coreml import ranges
    from ptebuild.backends.coreml.determinism import reproducible_payloads

    with reproducible_payloads(), ranges.sizes_stay_oblivious():
        yield


def compile_specs(options) -> list:
    """ExecuTorch's compile specs for the validated ``options`` (``generate_compile_specs``, plus
    the multimethod strategy)."""
    import coremltools as ct
    from executorch.backends.apple.coreml.compiler import CoreMLBackend as EtCoreMLBackend
    from executorch.backends.apple.coreml.compiler.coreml_preprocess import MULTIMETHOD_WEIGHT_SHARING_STRATEGY

    specs = EtCoreMLBackend.generate_compile_specs(
        compute_unit=getattr(ct.ComputeUnit, options.compute_units.upper()),
        minimum_deployment_target=getattr(ct.target, options.minimum_deployment_target),
        compute_precision=getattr(ct.precision, options.compute_precision.upper()),
        model_type=EtCoreMLBackend.MODEL_TYPE(options.model_type),
    )
    strategy = MULTIMETHOD_WEIGHT_SHARING_STRATEGY(options.multimethod_weight_sharing)
    specs.append(EtCoreMLBackend.generate_multimethod_weight_sharing_strategy_compile_spec(strategy))
    return specs


BACKEND = CoreMLBackend(
    name="coreml",
    options_factory=coreml_options.options_model,
    default_check=CheckTolerances(atol=1e-3, min_cosine=0.9999),
    payload_readers=PAYLOAD_READERS,
)
