"""Check a lowered program against eager PyTorch, in ExecuTorch's own runtime.

Every method runs on its example inputs and at the extremes of its dynamic dims; every output
is compared with the eager model's: max absolute error and cosine similarity. Runs in a worker.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptebuild.errors import BuildError, CheckError
from ptebuild.lowering.binding import call_method
from ptebuild.lowering.examples import check_sizes, flat_inputs, make_inputs
from ptebuild.plan import ProgramPlan


@dataclass(frozen=True)
class OutputFigures:
    method: str
    sizes: dict[str, int]
    output: int
    max_abs_error: float
    cosine: float

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "sizes": self.sizes,
            "output": self.output,
            "max_abs_error": self.max_abs_error,
            "cosine": self.cosine,
        }


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
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


def compare(expected: Any, actual: Any) -> tuple[float, float]:
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


def flatten_outputs(value: object) -> list[Any]:
    """The leaves of a method's result (tensors and scalars) in torch.export's order, which is
    the order of the program's output slots: nested tuples and lists in order, dicts in their
    keys' insertion order. A scalar leaf becomes a 0-d tensor (ExecuTorch returns ints and floats)."""
    import torch
    from torch.utils._pytree import tree_leaves

    leaves = tree_leaves(value)
    return [leaf if isinstance(leaf, torch.Tensor) else torch.tensor(leaf) for leaf in leaves
            if isinstance(leaf, (torch.Tensor, bool, int, float))]


def output_names(value: object) -> list[str]:
    """Where each leaf of :func:`flatten_outputs` sits in the result (``[1]['c']``), for messages."""
    import torch
    from torch.utils._pytree import keystr, tree_flatten_with_path

    pairs, _ = tree_flatten_with_path(value)
    return [keystr(path) for path, leaf in pairs if isinstance(leaf, (torch.Tensor, bool, int, float))]


class RuntimeLog:
    """What was written so far (read without moving the shared file offset fd 2 writes at)."""

    def __init__(self, fd: int, python_side: io.StringIO) -> None:
        self.fd, self.python_side = fd, python_side

    @property
    def text(self) -> str:
        return os.pread(self.fd, 1 << 20, 0).decode("utf-8", "replace") + self.python_side.getvalue()

    def lines(self) -> list[str]:
        return [re.sub(r"^\[[^\]]*\]\s*", "", line).strip() for line in self.text.splitlines() if line.strip()]


@contextlib.contextmanager
def runtime_log() -> Iterator[RuntimeLog]:
    """Collect what native code writes to file descriptor 2 (ExecuTorch's runtime logs the reason
    for an error there: ``Invalid number of inputs provided. Expected 6, but got 1``) while the
    block runs; ``log.lines()`` gives its lines without the ``[file.cpp:123]`` prefix."""
    import tempfile

    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            with contextlib.redirect_stderr(io.StringIO()) as python_side:
                yield RuntimeLog(capture.fileno(), python_side)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            logging.disable(previous)


_CHATTER = re.compile(r"cpuinfo|Reading file|Failed to open midr|CPU info", re.IGNORECASE)
_DETAIL = re.compile(r"^(dtype: \d+ \| dim order|\d+,|\]$)")
"""The kernel registry's per-argument listing after "kernel ... not found": for the log file only."""


def runtime_error(what: str, exc: BaseException, log: RuntimeLog, program_name: str) -> BuildError:
    """A failure inside ExecuTorch's runtime as one line: its message (error codes named) and the
    reason it logged; the log's lines are kept with the exception, for the program's log file."""
    from ptebuild.causes import describe, shorten

    said = [line for line in log.lines() if not _CHATTER.search(line) and not _DETAIL.match(line)]
    line = describe(exc).line + (f"; it logged: {shorten('; '.join(said[-3:]), 240)}" if said else "")
    error = BuildError(f"ExecuTorch's runtime failed {what}: {line}", location=f"programs.{program_name}")
    if log.text.strip():
        error.add_note("ExecuTorch's runtime logged:\n" + log.text.rstrip())
    return error


def compare_outputs(program_name: str, where: str, expected: list[Any], actual: list[Any],
                    names: list[str] | None = None) -> list[tuple[int, float, float]]:
    """(index, max abs error, cosine) of each output; CheckError if counts or shapes differ.

    ``where`` names the method (and sizes) in messages, e.g. ``method 'forward' at {'batch': 2}``;
    ``names`` (:func:`output_names`) says where each output sits in a nested result.
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
                f"{where} output {_slot(index, names)}: shape {tuple(a.shape)}, eager PyTorch {tuple(e.shape)}",
                location=f"programs.{program_name}",
            )
        figures.append((index, *compare(e, a)))
    return figures


def _slot(index: int, names: list[str] | None) -> str:
    return f"{index} ({names[index]})" if names and index < len(names) and names[index] not in ("", f"[{index}]") else str(index)


def checked_figures(program: ProgramPlan, method: str, sizes: dict[str, int], expected: list[Any], actual: list[Any], how: str = "",
                    names: list[str] | None = None) -> list[OutputFigures]:
    """Compare a method's outputs with eager PyTorch's at ``sizes``, leaf by leaf; CheckError past
    the program's tolerances (``how`` says how the program ran, for the message)."""
    where = f"method {method!r} at {sizes}"
    figures = []
    for index, max_abs, cosine in compare_outputs(program.name, where, expected, actual, names):
        figures.append(OutputFigures(method, sizes, index, max_abs, cosine))
        if not (max_abs <= program.atol and cosine >= program.min_cosine):
            raise CheckError(
                f"{where} output {_slot(index, names)} differs from eager PyTorch{how}: "
                f"max abs error {max_abs:.3g} (atol {program.atol:g}), cosine {cosine:.6f} "
                f"(min {program.min_cosine:g}); fix the model or loosen programs.{program.name}.check",
                location=f"programs.{program.name}",
            )
    return figures


@dataclass(frozen=True)
class DirectionBound:
    """A second eager reference whose outputs the program's must point along (cosine only): the
    float model a quantized program came from, when ``model`` is its quantized eager twin."""

    model: object
    min_cosine: float
    name: str
    """In messages: ``the float model``."""
    fix: str
    """What to do when an output points elsewhere (the message's end)."""


def check_program(model: Any, program: ProgramPlan, pte: Path, ptd: Path | None, how: str = "",
                  direction: DirectionBound | None = None) -> list[OutputFigures]:
    """Run ``pte`` in ExecuTorch's runtime and compare every output with ``model``'s.

    ``how`` says what ``model`` is, for messages; ``direction``: also compare each output's
    cosine with another model's (no figures: ``model``'s are the program's).
    Raises CheckError naming the method, output and figures of the first mismatch.
    """
    import torch
    from executorch.runtime import Runtime

    from ptebuild.runtime import check as check_files

    # Before running anything: the .pte's every weight key is in the .ptd, and every weight's
    # bytes hash to the SHA-256 its key names (a program whose keys carry no digest is refused).
    check_files(pte, [ptd] if ptd else [], verify_bytes=True)
    with runtime_log() as log:
        # XNNPACK's cpuinfo prints probe chatter to fd 2 on the first load; errors say more there.
        try:
            loaded = Runtime.get().load_program(pte, data_path=ptd)
        except Exception as exc:
            raise runtime_error(f"to load {pte.name}", exc, log, program.name) from exc
    figures = []
    for method in program.methods:
        with runtime_log() as log:
            try:
                executable = loaded.load_method(method.name)
            except Exception as exc:
                raise runtime_error(f"to load method {method.name!r}", exc, log, program.name) from exc
        for sizes in check_sizes(method):
            inputs = make_inputs(method, program.seed, sizes)
            with torch.no_grad():
                result = call_method(model, method, inputs, program.model)
            expected, names = flatten_outputs(result), output_names(result)
            with runtime_log() as log:
                try:
                    actual = flatten_outputs(list(executable.execute(flat_inputs(inputs))))
                except Exception as exc:
                    raise runtime_error(f"to run method {method.name!r} at {sizes}", exc, log, program.name) from exc
            figures += checked_figures(program, method.name, sizes, expected, actual, how=how, names=names)
            if direction is not None:
                with torch.no_grad():
                    other = flatten_outputs(call_method(direction.model, method, inputs, program.model))
                where = f"method {method.name!r} at {sizes}"
                for index, _, cosine in compare_outputs(program.name, where, other, actual, names):
                    if cosine < direction.min_cosine:
                        raise CheckError(
                            f"{where} output {_slot(index, names)} points away from {direction.name}'s: cosine "
                            f"{cosine:.6f} (min {direction.min_cosine:g}); {direction.fix}",
                            location=f"programs.{program.name}",
                        )
    return figures
