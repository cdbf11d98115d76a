"""Run a built program on its example inputs, next to eager PyTorch: error figures and latency.

The program's files are taken from the manifest's output folder (or another one), loaded
through :func:`ptebuild.runtime.load` (so a ``.ptd`` that does not belong to the ``.pte`` is
refused before executing), and every method runs on the same example inputs the build checked
it with (:func:`ptebuild.lowering.examples.make_inputs` with the program's seed, at the example
sizes: the first of the check's sizes). The eager model is built as the build builds it
(:func:`ptebuild.models.factory.loading.build_model`) and held as the check holds it: its backend's
reference (:meth:`~ptebuild.backends.base.Backend.reference_model`: torchao's eager model for
an ``8da4w`` program), so that the figures are the check's on the same inputs.

Latency is the median wall time of ``iters`` calls after one warm-up call, for the program in
ExecuTorch's runtime and for the eager model (under ``torch.no_grad``), on the same inputs.
Imports torch and executorch when :func:`run_program` is called, not when imported.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from ptebuild.errors import LoadError, UsageError
from ptebuild.manifest.typos import did_you_mean
from ptebuild.plan import BuildPlan, ProgramPlan


@dataclass(frozen=True)
class OutputRun:
    index: int
    shape: tuple[int, ...]
    max_abs_error: float
    cosine: float
    within_tolerance: bool = True
    """Within the check's tolerance for the output's dtype (:mod:`ptebuild.tolerances`)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "output": self.index,
            "shape": list(self.shape),
            "max_abs_error": self.max_abs_error,
            "cosine": self.cosine,
            "within_tolerance": self.within_tolerance,
        }


@dataclass(frozen=True)
class MethodRun:
    """One method: its outputs against eager PyTorch and both latencies, in seconds."""

    method: str
    outputs: tuple[OutputRun, ...]
    latency: float
    eager_latency: float
    within_tolerance: bool

    @property
    def max_abs_error(self) -> float:
        return max((o.max_abs_error for o in self.outputs), default=0.0)

    @property
    def cosine(self) -> float:
        return min((o.cosine for o in self.outputs), default=1.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "max_abs_error": self.max_abs_error,
            "cosine": self.cosine,
            "within_tolerance": self.within_tolerance,
            "latency_ms": self.latency * 1e3,
            "eager_latency_ms": self.eager_latency * 1e3,
            "outputs": [o.to_json() for o in self.outputs],
        }


@dataclass(frozen=True)
class ProgramRun:
    program: str
    backend: str
    pte: Path
    ptd: Path | None
    iters: int
    atol: float
    min_cosine: float
    methods: tuple[MethodRun, ...]
    inputs: str = ""
    """Which inputs it ran on, in words (the check's example inputs: seed and sizes)."""
    reference: str = "eager PyTorch"
    """What its outputs were compared with (the check's reference)."""

    @property
    def within_tolerance(self) -> bool:
        return all(m.within_tolerance for m in self.methods)

    def to_json(self) -> dict[str, Any]:
        return {
            "program": self.program,
            "backend": self.backend,
            "pte": str(self.pte),
            "ptd": str(self.ptd) if self.ptd else None,
            "iters": self.iters,
            "atol": self.atol,
            "min_cosine": self.min_cosine,
            "inputs": self.inputs,
            "reference": self.reference,
            "within_tolerance": self.within_tolerance,
            "methods": [m.to_json() for m in self.methods],
        }


def find_program(plan: BuildPlan, name: str) -> ProgramPlan:
    """The program called ``name``. Raises UsageError with a "did you mean" otherwise."""
    names = [p.name for p in plan.programs]
    for program in plan.programs:
        if program.name == name:
            return program
    known = ", ".join(names) or "none"
    raise UsageError(f"{plan.manifest}: no program {name!r}{did_you_mean(name, names)}; name one of {known}")


def built_files(plan: BuildPlan, program: ProgramPlan, out_dir: Path | None = None) -> tuple[Path, Path | None]:
    """The ``.pte`` and ``.ptd`` of ``program`` in ``out_dir`` (default: the manifest's).

    Raises:
        LoadError: one of them does not exist yet; the message says which build to run.
    """
    folder = out_dir if out_dir is not None else plan.out_dir()
    pte = folder / program.pte_name
    ptd = folder / program.ptd_name if program.ptd_name else None
    for path in (pte, ptd):
        if path is not None and not path.is_file():
            command = f"ptebuild build {plan.manifest}" + (f" --out {out_dir}" if out_dir is not None else "")
            raise LoadError(f"{path}: program {program.name!r} is not built yet; run `{command}` first")
    return pte, ptd


def run_program(
    plan: BuildPlan,
    name: str,
    *,
    method: str | None = None,
    iters: int = 20,
    out_dir: Path | None = None,
) -> ProgramRun:
    """Run program ``name`` of ``plan`` (each method, or only ``method``) and time it against eager.

    Raises:
        UsageError: no such program or method, or ``iters`` < 1.
        LoadError: the program is not built, or its files do not belong together.
        CheckError: the program and eager PyTorch return different numbers or shapes of outputs.
        ManifestError, BuildError: the eager model cannot be built.
    """
    if iters < 1:
        raise UsageError(f"--iters {iters}: give at least 1")
    program = find_program(plan, name)
    method_names = [m.name for m in program.methods]
    if method is not None and method not in method_names:
        raise UsageError(
            f"{plan.manifest}: program {name!r} has no method {method!r}"
            f"{did_you_mean(method, method_names)}; name one of {', '.join(method_names)}"
        )
    methods = [m for m in program.methods if method is None or m.name == method]
    pte, ptd = built_files(plan, program, out_dir)

    import torch

    from ptebuild.lowering.binding import bind
    from ptebuild.lowering.check import flatten_outputs, native_stderr_silenced
    from ptebuild.lowering.examples import flat_inputs, make_inputs
    from ptebuild.models.factory.loading import build_model
    from ptebuild.runtime import load

    with native_stderr_silenced():
        # executorch's import and XNNPACK's cpuinfo print probe chatter on stderr.
        loaded = load(pte, [ptd] if ptd else [])
    from ptebuild.backends import bound_backend

    backend = bound_backend(program).backend
    model = build_model(program, Path(plan.manifest_dir), plan.manifest)
    reference = backend.reference_model(model, program)  # what the build's check held it to

    runs = []
    for spec in methods:
        inputs = make_inputs(spec, program.seed)
        flat = flat_inputs(inputs)  # ExecuTorch takes the leaves of nested inputs, in export's order
        function = getattr(reference, spec.function)
        eager_fn = partial(bind(function, spec, program.model).call, function, inputs)
        with native_stderr_silenced():
            # The first call loads the method (XNNPACK sets up its delegate here).
            actual = flatten_outputs(loaded.run(spec.name, flat))
        with torch.no_grad():
            expected = flatten_outputs(eager_fn())
        outputs = _compare(program, spec.name, expected, actual)
        latency = _median_time(partial(loaded.run, spec.name, flat), iters)
        with torch.no_grad():
            eager_latency = _median_time(eager_fn, iters)
        within = all(o.within_tolerance for o in outputs)
        runs.append(MethodRun(spec.name, outputs, latency, eager_latency, within))
    return ProgramRun(
        program=program.name,
        backend=program.backend,
        pte=pte,
        ptd=ptd,
        iters=iters,
        atol=program.atol,
        min_cosine=program.min_cosine,
        methods=tuple(runs),
        inputs=_inputs_words(program, methods),
        reference="eager PyTorch" if reference is model else "the check's reference: the eager model quantized as the program was",
    )


def _inputs_words(program: ProgramPlan, methods: list[Any]) -> str:
    """``the check's example inputs (seed 0; batch=2)``: what :func:`run_program` ran on."""
    sizes = sorted({f"{d.name}={d.example}" for m in methods for d in m.dims})
    return f"the check's example inputs (seed {program.seed}" + (f"; {', '.join(sizes)}" if sizes else "") + ")"


def _compare(program: ProgramPlan, method: str, expected: list[Any], actual: list[Any]) -> tuple[OutputRun, ...]:
    from ptebuild.lowering.check import compare_outputs, dtype_name, measure

    compare_outputs(program.name, f"method {method!r}", expected, actual)  # counts and shapes
    settings = program.check_settings()
    runs = []
    for index, (e, a) in enumerate(zip(expected, actual)):
        found = measure(e, a, settings.for_dtype(dtype_name(e)))
        within = found.within and found.cosine >= found.tolerance.min_cosine
        runs.append(OutputRun(index, tuple(e.shape), found.max_abs_error, found.cosine, within))
    return tuple(runs)


def _median_time(call: Callable[[], object], iters: int) -> float:
    """Median wall time of ``iters`` calls of ``call``, after one warm-up call."""
    call()
    times = []
    for _ in range(iters):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)
