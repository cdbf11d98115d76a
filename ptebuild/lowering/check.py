"""Check a lowered program against eager PyTorch, in ExecuTorch's own runtime.

Every method runs on its example inputs and at the extremes of its dynamic dims; every output
is compared with the eager model's: max absolute error and cosine similarity. Runs in a worker.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ptebuild.errors import CheckError
from ptebuild.lowering.examples import check_sizes, make_inputs
from ptebuild.plan import ProgramPlan


@dataclass(frozen=True)
class OutputFigures:
    method: str
    sizes: dict[str, int]
    output: int
    max_abs_error: float
    cosine: float

    def to_json(self) -> dict:
        return {
            "method": self.method,
            "sizes": self.sizes,
            "output": self.output,
            "max_abs_error": self.max_abs_error,
            "cosine": self.cosine,
        }


@contextlib.contextmanager
def native_stderr_silenced():
    """Silence what nobody needs: file descriptor 2, ``sys.stderr`` and logging below errors.

    Native code (XNNPACK's cpuinfo, torchao) writes to fd 2; executorch's pybindings write to
    ``sys.stderr`` and torchao's import warns through logging, neither of which is fd 2 when the
    caller has replaced ``sys.stderr`` (pytest's capture, an embedding application).
    """
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    devnull = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(2)
    os.dup2(devnull, 2)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
        logging.disable(previous)


def compare(expected, actual) -> tuple[float, float]:
    """Max absolute error and cosine similarity of two tensors (as float64)."""
    import torch

    e = expected.detach().to(torch.float64).flatten()
    a = actual.detach().to(torch.float64).flatten()
    if e.numel() == 0:
        return 0.0, 1.0
    max_abs = float((e - a).abs().max())
    norms = float(e.norm() * a.norm())
    if norms == 0.0:
        cosine = 1.0 if float(e.norm()) == float(a.norm()) else 0.0
    else:
        cosine = float(torch.dot(e, a) / norms)
    return max_abs, cosine


def flatten_outputs(value) -> list:
    """The tensors of a method's result, in a stable order (nested lists, tuples and dicts)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in flatten_outputs(item)]
    if isinstance(value, dict):
        return [t for key in sorted(value) for t in flatten_outputs(value[key])]
    return []


def compare_outputs(program_name: str, where: str, expected: list, actual: list) -> list[tuple[int, float, float]]:
    """(index, max abs error, cosine) of each output; CheckError if counts or shapes differ.

    ``where`` names the method (and sizes) in messages, e.g. ``method 'forward' at {'batch': 2}``.
    """
    if len(expected) != len(actual):
        raise CheckError(
            f"{where} returned {len(actual)} outputs, eager PyTorch {len(expected)}",
            location=f"programs.{program_name}",
        )
    figures = []
    for index, (e, a) in enumerate(zip(expected, actual)):
        if tuple(e.shape) != tuple(a.shape):
            raise CheckError(
                f"{where} output {index}: shape {tuple(a.shape)}, eager PyTorch {tuple(e.shape)}",
                location=f"programs.{program_name}",
            )
        figures.append((index, *compare(e, a)))
    return figures


def checked_figures(program: ProgramPlan, method: str, sizes: dict, expected: list, actual: list, how: str = "") -> list[OutputFigures]:
    """Compare a method's outputs with eager PyTorch's at ``sizes``; CheckError past the program's
    tolerances (``how`` says how the program ran, for the message)."""
    where = f"method {method!r} at {sizes}"
    figures = []
    for index, max_abs, cosine in compare_outputs(program.name, where, expected, actual):
        figures.append(OutputFigures(method, sizes, index, max_abs, cosine))
        if not (max_abs <= program.atol and cosine >= program.min_cosine):
            raise CheckError(
                f"{where} output {index} differs from eager PyTorch{how}: "
                f"max abs error {max_abs:.3g} (atol {program.atol:g}), cosine {cosine:.6f} "
                f"(min {program.min_cosine:g}); fix the model or loosen programs.{program.name}.check",
                location=f"programs.{program.name}",
            )
    return figures


def check_program(model, program: ProgramPlan, pte: Path, ptd: Path | None) -> list[OutputFigures]:
    """Run ``pte`` in ExecuTorch's runtime and compare every output with ``model``'s.

    Raises CheckError naming the method, output and figures of the first mismatch.
    """
    import torch
    from executorch.runtime import Runtime

    from ptebuild.runtime import check as check_files

    # Before running anything: the .pte's every weight key is in the .ptd, and every weight's
    # bytes hash to the SHA-256 its key names (a program whose keys carry no digest is refused).
    check_files(pte, [ptd] if ptd else [], verify_bytes=True)
    with native_stderr_silenced():
        # XNNPACK's cpuinfo prints probe chatter to fd 2 on the first load.
        loaded = Runtime.get().load_program(pte, data_path=ptd)
    figures = []
    for method in program.methods:
        executable = loaded.load_method(method.name)
        for sizes in check_sizes(method):
            inputs = make_inputs(method, program.seed, sizes)
            with torch.no_grad():
                expected = flatten_outputs(getattr(model, method.function)(*inputs))
            actual = flatten_outputs(list(executable.execute(list(inputs))))
            figures += checked_figures(program, method.name, sizes, expected, actual)
    return figures
