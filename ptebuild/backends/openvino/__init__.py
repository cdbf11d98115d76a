"""The OpenVINO backend: ExecuTorch 1.5.1's ``OpenvinoPartitioner``/``OpenvinoBackend``.

Installed with the extra ``pip install 'ptebuild[openvino]'`` (the ``openvino`` runtime and
``nncf``, which ``executorch.backends.openvino`` imports). Lowering is ExecuTorch's: the
partitioner tags what OpenVINO's PyTorch frontend supports, and the delegate's ``preprocess``
converts each partition to an OpenVINO model, compiles it for the device and keeps the compiled
model's ``export_model()`` stream as the payload (:mod:`ptebuild.runtime.payload_readers.openvino`).

**Compile specs** (``compile_specs = { device = "CPU" }``), only what ExecuTorch 1.5.1 honours:
``preprocess`` passes every spec to ``openvino_compile`` as a string, and its runtime
(``backends/openvino/runtime/OpenvinoBackend.cpp``) reads ``device`` alone and imports the
payload with ``ov_core_import_model`` and no properties. So:

- ``device``: ``CPU`` (default), ``GPU`` or ``NPU``. It is the device the model is compiled for
  when lowering (OpenVINO asserts that it is in ``Core().available_devices``) and run on;
- ``config`` (a table of OpenVINO properties) is refused: it arrives as a string, which
  OpenVINO's ``compile_model`` rejects, and the runtime would not pass it anyway;
- ``cache_dir`` is refused: OpenVINO reads it only with a model hash that ExecuTorch never gives;
- precision hints (``INFERENCE_PRECISION_HINT``...) are refused: an unknown spec is silently
  ignored by both sides, and the runtime's import takes no properties.

**Precision.** A program runs at its device's default inference precision, whatever was set
when lowering: on the CPU plugin f32 on CPUs without bf16 arithmetic (this AVX2 machine:
``INFERENCE_PRECISION_HINT`` is f32, and the check's error is 1e-7), bf16 on CPUs with
AVX512-BF16 or AMX (OpenVINO's documented default), f16 on ARM. The check runs here at this
machine's precision (named in the check's kind, ``executorch-runtime-openvino-f32``), with that
precision's tolerances (:func:`tolerances_at`): a float32 program computed in bf16 is held to
what a bfloat16 program is. The precision is a key fact, so a machine of the other precision
builds and checks the program anew.

**Bytes.** The payload is a compiled model: OpenVINO's CPU plugin splits work by the number of
CPUs this process may use (seen: 14249 bytes with one CPU, 16374 with two, same model) and
picks kernels and precision by instruction set. Those are key facts (:func:`toolchain_facts`);
two builds on one machine give the same bytes. Programs take static shapes only: ExecuTorch
1.5.1 compiles the partition at the example's upper bounds (a dynamic batch of 1 returned 8
rows of garbage), so a method with dynamic dims is refused when the manifest is read.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Literal

from ptebuild.backends.base import Backend, CheckKind, CheckTolerances
from ptebuild.runtime.payload_readers.openvino import READERS as PAYLOAD_READERS

DEVICES = ("CPU", "GPU", "NPU")
Device = Literal["CPU", "GPU", "NPU"]
INSTALL = "pip install 'ptebuild[openvino]'"
REQUIRED_PACKAGES = ("openvino", "nncf")
"""Imported by ``executorch.backends.openvino`` (its package imports nncf's quantizer)."""

NOT_HONOURED = {
    "config": "ExecuTorch 1.5.1 passes compile specs to OpenVINO as strings and OpenVINO's compile_model "
              "needs a table of properties here, and its runtime imports the program without properties: not honoured",
    "cache_dir": "OpenVINO reads cache_dir only with a model hash that ExecuTorch 1.5.1 never passes: not honoured",
    "INFERENCE_PRECISION_HINT": "ExecuTorch 1.5.1's runtime imports the program without properties, so the device's "
                                "default precision applies (the check's tolerances hold at bf16): not honoured",
}
NOT_HONOURED["inference_precision"] = NOT_HONOURED["INFERENCE_PRECISION_HINT"]

OPENVINO_CHECK = CheckTolerances(atol=1e-2, rtol=1e-3, min_cosine=0.9999)
"""Against eager PyTorch, where OpenVINO infers at f32 (the CPU plugin on CPUs without bf16
arithmetic): the error seen is 1e-7, so a real lowering fault fails."""

OPENVINO_CHECK_16 = CheckTolerances(atol=1e-2, rtol=32 * 2.0**-7, min_cosine=0.999)
"""Where OpenVINO infers at bf16 (the CPU plugin's default on CPUs with AVX512-BF16 or AMX) or
f16 (ARM, Intel GPUs and NPUs): a float32 program is then computed in 16 bits, every product
rounded to 8 bits of mantissa (bf16), and is held to what ptebuild holds a bfloat16 program to
(:data:`ptebuild.tolerances.DTYPE_TOLERANCES`: 32 units of bf16's rounding, cosine 0.999). Seen on
an AMX CPU: two transformer layers and a convolution, error 0.0106 on an element of 0.25 (cosine
0.999993), over f32's bound."""


def tolerances_at(precision: str) -> CheckTolerances:
    """The check's defaults where OpenVINO infers at ``precision`` (``f32``, ``bf16``, ``f16``)."""
    return OPENVINO_CHECK if precision == "f32" else OPENVINO_CHECK_16


@functools.cache
def options_model() -> type:
    """The OpenVINO backend's compile specs as a pydantic model (defined on first use)."""
    from pydantic import model_validator

    from ptebuild.backends.options import BackendOptions

    class OpenvinoOptions(BackendOptions):
        """The OpenVINO backend's compile specs (only what ExecuTorch 1.5.1 honours)."""

        device: Device = "CPU"
        """The OpenVINO device the program is compiled for and runs on: ``CPU``, ``GPU`` (Intel
        graphics) or ``NPU``; lowering needs that device on the building machine."""

        @model_validator(mode="before")
        @classmethod
        def _honoured_only(cls, data):
            if isinstance(data, dict):
                for key, why in NOT_HONOURED.items():
                    if key in data:
                        raise ValueError(f"{key}: {why}; remove it")
            return data

    return OpenvinoOptions


def device_of(options) -> str:
    """The ``device`` of the validated model or plain dict ``options`` (default CPU)."""
    if options is None:
        return "CPU"
    return options.get("device", "CPU") if isinstance(options, dict) else options.device


def missing_packages() -> list[str]:
    """The packages of the extra that cannot be imported here (found without importing them)."""
    missing = []
    for name in REQUIRED_PACKAGES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


@functools.cache
def available_devices() -> tuple[str, ...] | str:
    """OpenVINO's ``Core().available_devices``, asked in a child interpreter (the builder never
    loads OpenVINO's runtime and its threads), or why they cannot be listed."""
    code = "import openvino; print(' '.join(openvino.Core().available_devices))"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot ask OpenVINO for its devices: {exc}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"cannot ask OpenVINO for its devices: {last}"
    return tuple(done.stdout.split())


def _dist_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "none"


@functools.cache
def _cpu_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


# The CPU plugin's instruction-set tiers, best first (what it picks kernels by), by /proc/cpuinfo flag.
_ISA_TIERS = (
    ("amx", "amx_bf16"), ("avx512_bf16", "avx512_bf16"), ("avx512_vnni", "avx512_vnni"),
    ("avx512", "avx512f"), ("avx2_vnni", "avx_vnni"), ("avx2", "avx2"), ("sse4.2", "sse4_2"),
)


def cpu_isa() -> str:
    """The best instruction-set tier the CPU plugin can use here (``avx2``...), or the machine."""
    flags = _cpu_flags()
    return next((tier for tier, flag in _ISA_TIERS if flag in flags), platform.machine() or "unknown")


def cpu_precision() -> str:
    """The CPU plugin's default inference precision here, from the CPU's flags (no OpenVINO
    import): bf16 with AVX512-BF16 or AMX, f16 on ARM with half-precision arithmetic, else f32."""
    flags = _cpu_flags()
    if flags & {"avx512_bf16", "amx_bf16"}:
        return "bf16"
    if platform.machine() in ("aarch64", "arm64") and flags & {"asimdhp", "fphp"}:
        return "f16"
    return "f32"


def usable_cpus() -> int:
    """The CPUs this process may run on (the CPU plugin splits work by them)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def toolchain_facts(options) -> dict[str, str]:
    """The key facts: openvino and nncf versions, and for CPU programs what the CPU plugin
    compiles by (instruction set, default precision, usable CPUs): read without importing."""
    facts = {
        "openvino.version": _dist_version("openvino"),
        "openvino.nncf": _dist_version("nncf"),
    }
    if device_of(options) == "CPU":
        facts["openvino.cpu"] = f"{cpu_isa()} {cpu_precision()} {usable_cpus()} cpus"
    return facts


EXECUTORCH_RUNTIME_OPENVINO = CheckKind("executorch-runtime-openvino")
"""Every method run in ExecuTorch's runtime on OpenVINO, against eager PyTorch; the name the
check reports adds the precision it ran at (``executorch-runtime-openvino-f32``)."""


@dataclass(frozen=True)
class OpenvinoBackend(Backend):
    keeps_data_in_pte: bool = True
    """The compiled model carries its weights inside the payload: no ``.ptd`` to write."""
    forks_safely: bool = True
    """OpenVINO is imported by the lowering child itself, never by the warm server it forks from."""
    toolchain_from_files: bool = False
    """The key's CPU facts (usable CPUs, instruction set) are the machine's, not files' stats."""

    def check_defaults(self, options) -> CheckTolerances:
        """The tolerances of the precision the device infers at (:func:`tolerances_at`): on the
        CPU, read from its flags (a key fact: a machine of the other precision builds and checks
        anew); other devices infer at f16 by default."""
        return tolerances_at(cpu_precision() if device_of(options) == "CPU" else "f16")

    def toolchain_facts(self, options) -> dict[str, str]:
        return toolchain_facts(options)

    def can_build(self, options=None) -> str | None:
        missing = missing_packages()
        if missing:
            return f"the {' and '.join(missing)} package{'s are' if len(missing) > 1 else ' is'} not installed ({INSTALL})"
        device = device_of(options)
        if device == "CPU":
            return None
        devices = available_devices()
        if isinstance(devices, str):
            return devices
        if device not in devices:
            return f"OpenVINO sees no {device} device here (only {', '.join(devices) or 'none'})"
        return None

    def can_check(self, options=None) -> str | None:
        """The check runs the program on its device, with the openvino package's runtime: the
        same needs as lowering."""
        return self.can_build(options)

    def check_kind(self, options=None) -> CheckKind:
        return EXECUTORCH_RUNTIME_OPENVINO

    # -- in a worker ----------------------------------------------------------------------------

    def partitioners(self, options, program=None) -> list:
        from executorch.backends.openvino import OpenvinoPartitioner
        from executorch.exir.backend.compile_spec_schema import CompileSpec

        return [OpenvinoPartitioner([CompileSpec("device", options.device.encode())])]

    def ready_runtime(self) -> None:
        _point_runtime_at_openvino()

    def check(self, model, program, pte, ptd, samples=None):
        """Run in ExecuTorch's runtime (its OpenvinoBackend loads the openvino package's runtime)
        against eager PyTorch; the check's name says the precision OpenVINO ran at."""
        from ptebuild.errors import BuildError
        from ptebuild.lowering.check import check_program

        options = self.program_options(program)
        self.ready_runtime()
        try:
            figures = check_program(model, program, pte, ptd, samples=samples)
        except BuildError as error:
            scalars = zero_dim_arguments(pte)
            if not scalars:
                raise
            # The known limit (openvino-zero-dim) matches these words and adds what to do.
            again = type(error)(f"{error.message}; its OpenVINO delegate has arguments of 0 dims: {', '.join(scalars)}",
                                manifest=error.manifest, location=error.location)
            raise again from error
        return figures, f"{EXECUTORCH_RUNTIME_OPENVINO.name}-{inference_precision(options.device)}"


def zero_dim_arguments(pte: Path) -> list[str]:
    """The tensors of 0 dims (scalars) that the program's delegate calls pass (``method 'forward'
    delegate 0 argument 1: float32[]``): ExecuTorch 1.5.1's OpenVINO runtime fails on them."""
    from ptebuild.lowering.structure import delegate_calls, tensor_arg
    from ptebuild.runtime.pte_file import open_pte

    found = []
    with open_pte(pte) as reader:
        for plan in reader.execution_plans():
            values = plan.values()
            calls, _ = delegate_calls(plan)
            for call in calls:
                for position, index in enumerate(call.args):
                    arg = tensor_arg(values, index)
                    if arg is not None and not arg.sizes:
                        found.append(f"method {plan.name()!r} delegate {call.delegate} argument {position}: {arg.describe()}")
    return found


def _point_runtime_at_openvino() -> None:
    """Set ``OPENVINO_LIB_PATH`` to the openvino package's ``libopenvino_c.so``, unless set.

    ExecuTorch's OpenvinoBackend ``dlopen``s that library at the first OpenVINO program, from
    ``$OPENVINO_LIB_PATH``, which ``executorch.extension.pybindings.portable_lib`` sets when it
    is imported, if openvino is installed then. A warm worker server that imported executorch
    before ``pip install 'ptebuild[openvino]'`` has no such variable (seen: "OpenVINO runtime
    not found (dlopen failed: libopenvino_c.so ...)"); its children find the library here.
    """
    if os.environ.get("OPENVINO_LIB_PATH"):
        return
    spec = importlib.util.find_spec("openvino")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        found = sorted(Path(folder, "libs").glob("libopenvino_c.so*"))
        if found:
            os.environ["OPENVINO_LIB_PATH"] = str(found[0])
            return


def inference_precision(device: str) -> str:
    """The precision ``device`` infers at when a program is imported without properties (what
    ExecuTorch's runtime does): OpenVINO's ``INFERENCE_PRECISION_HINT`` default (``f32``, ``bf16``)."""
    import openvino

    value = openvino.Core().get_property(device, "INFERENCE_PRECISION_HINT")
    return value.get_type_name() if hasattr(value, "get_type_name") else str(value)


BACKEND = OpenvinoBackend(
    name="openvino",
    options_factory=options_model,
    default_check=OPENVINO_CHECK,
    payload_readers=PAYLOAD_READERS,
    static_shapes="compiles each partition at fixed shapes in ExecuTorch 1.5.1 (a dynamic batch of 1 "
                  "ran at the upper bound and returned its rows)",
)
