"""Check a lowered program against eager PyTorch, in ExecuTorch's own runtime, as it will run.

Every method runs in ExecuTorch's runtime on generated inputs at its example size and at the
extremes of its dynamic dims, and on its samples (:mod:`ptebuild.lowering.samples`); every output
is held to its tolerance (:mod:`ptebuild.tolerances`: by dtype and magnitude, the backend's on
top, the manifest's over both). What the check proves is a :class:`~ptebuild.figures.Verdict`
per output (:class:`~ptebuild.figures.OutputFigures`):

- an output within its tolerance passes, unless eager PyTorch's output is degenerate (all zeros,
  constant, or so small that an all-zero output would pass): then the check proves nothing, and
  says so with the reason;
- an output beyond its tolerance but close to eager (a near miss) fails with the figures and
  the way to loosen the check if the error is expected of the backend;
- an output far from eager (cosine under :data:`~ptebuild.tolerances.WRONG_COSINE`, an error
  as large as the output, top-1 agreement of class scores under
  :data:`~ptebuild.tolerances.WRONG_TOP1`, or NaN where eager has none) is a wrong program
  (:class:`WrongProgram`): the line says the program computes something else and never advises
  loosening; the worker then looks for the operator where it first diverges
  (:mod:`ptebuild.lowering.divergence`).

Checked as it will run: a device loads a program once and runs it with varying sizes. Each size
first runs in a freshly loaded program (what no earlier call can have touched: a delegate's
memory may be shared by every method of a loaded program), then all sizes run again in one
freshly loaded program growing, shrinking and each twice, and the samples after them. A run
whose outputs move from the fresh run's (beyond the dtype's own rounding, :data:`~ptebuild.
tolerances.DTYPE_TOLERANCES`) shows a program whose answers depend on what ran before: it is
refused (:class:`OrderDependent`) with the sizes and the order. A model whose eager call changes
its own buffers (a cache) is stateful: its methods run once through their sizes in order, in
lockstep with the eager model, as before.

Runs in a worker.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptebuild.errors import REPORT, BuildError, CheckError
from ptebuild.figures import OutputFigures, Verdict
from ptebuild.lowering.binding import call_method
from ptebuild.lowering.examples import check_inputs, check_sizes, flat_inputs
from ptebuild.lowering.state import restore_buffers, saved_buffers, versions
from ptebuild.plan import MethodPlan, ProgramPlan
from ptebuild.tolerances import DTYPE_TOLERANCES, EXACT, WRONG_COSINE, WRONG_TOP1, Tolerance, is_float

__all__ = ["OutputFigures", "Verdict", "WrongProgram", "check_program", "checked_figures", "judge", "measure",
           "refusal", "wrong_program"]

WRONG_RELATIVE_ERROR = 0.5
"""An output whose error's RMS is half its own RMS or more is wrong (a cosine cannot see a scale)."""


class WrongProgram(CheckError):
    """An output far from eager PyTorch's: the program computes something else (no tolerance fixes it).

    ``method``, ``inputs`` and ``output`` say where, for the search of the first divergence."""

    def __init__(self, message: str, *, location: str, method: str = "", inputs: tuple[Any, ...] = (),
                 output: int = 0) -> None:
        super().__init__(message, location=location)
        self.method, self.inputs, self.output = method, inputs, output


@contextlib.contextmanager
def wrong_at(method: str, inputs: tuple[Any, ...]) -> Iterator[None]:
    """A :class:`WrongProgram` raised in the block that names no inputs of its own names ``method``
    and ``inputs``: where the search for the first divergence looks (a language model's first call
    from an empty cache)."""
    try:
        yield
    except WrongProgram as wrong:
        if not wrong.inputs:
            wrong.method, wrong.inputs = method, inputs
        raise


class OrderDependent(CheckError):
    """A program whose outputs for the same inputs depend on what ran before on the loaded program."""


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
    _same_layout(program_name, where, expected, actual, names)
    return [(index, *compare(e, a)) for index, (e, a) in enumerate(zip(expected, actual))]


def _same_layout(program_name: str, where: str, expected: list[Any], actual: list[Any], names: list[str] | None) -> None:
    if len(expected) != len(actual):
        raise CheckError(
            f"{where} returned {len(actual)} outputs, eager PyTorch {len(expected)}; {REPORT}",
            location=f"programs.{program_name}",
        )
    for index, (e, a) in enumerate(zip(expected, actual)):
        if tuple(e.shape) != tuple(a.shape):
            raise CheckError(
                f"{where} output {_slot(index, names)}: shape {tuple(a.shape)}, eager PyTorch {tuple(e.shape)}; "
                "the program computes something else than the model: check the model for this backend",
                location=f"programs.{program_name}",
            )


def _slot(index: int, names: list[str] | None) -> str:
    return f"{index} ({names[index]})" if names and index < len(names) and names[index] not in ("", f"[{index}]") else str(index)


def dtype_name(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


@dataclass(frozen=True)
class Measure:
    """One output against eager PyTorch's, held to one tolerance (all as float64)."""

    dtype: str
    tolerance: Tolerance
    max_abs_error: float
    cosine: float
    worst_excess: float
    """max ``|a - e| / bound``; ``inf`` where a bound of 0 (exact) is broken."""
    worst_at: float
    """``|e|`` at the element of ``worst_excess``."""
    magnitude: float
    """mean ``|e|``."""
    eager_max: float
    relative_error: float
    """RMS of the error over RMS of eager's output (``inf`` when eager's is 0 and the error is not)."""
    zero_passes: bool
    """An all-zero output would be within the bound: the element-wise check cannot fail."""
    eager_constant: float | None
    """Eager's value, if every element of its output (more than one) is that one value."""
    program_zero: bool
    """The program's output is all zeros, and eager's is not."""
    mismatched: int
    """Elements beyond the bound (of ``numel``)."""
    numel: int
    nonfinite: str = ""
    """Where NaN or infinity stand in one output and not in the other, in words."""

    @property
    def within(self) -> bool:
        return not self.nonfinite and self.worst_excess <= 1.0 and (self.tolerance.rtol > 0 or self.tolerance.atol > 0
                                                                     or self.mismatched == 0)


def measure(expected: Any, actual: Any, tolerance: Tolerance) -> Measure:
    """``actual`` against ``expected`` under ``tolerance`` (:mod:`ptebuild.tolerances`' rule)."""
    import torch

    e = expected.detach().to(torch.float64).flatten()
    a = actual.detach().to(torch.float64).flatten()
    numel = int(e.numel())
    nonfinite = ""
    e_bad, a_bad = ~torch.isfinite(e), ~torch.isfinite(a)
    if bool((e_bad | a_bad).any()):
        same = (e_bad == a_bad) & ((e == a) | (torch.isnan(e) & torch.isnan(a)))
        broken = (e_bad | a_bad) & ~same
        if bool(broken.any()):
            only_program = int((a_bad & ~e_bad).sum())
            nonfinite = (f"the program returns NaN or infinity in {only_program} of {numel} elements where eager PyTorch "
                         "returns numbers" if only_program else
                         f"eager PyTorch returns NaN or infinity in {int((e_bad & ~a_bad).sum())} of {numel} elements "
                         "where the program returns numbers")
        keep = ~(e_bad | a_bad)
        e, a = e[keep], a[keep]
    if e.numel() == 0:
        return Measure(dtype_name(expected), tolerance, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, True, None, False, 0, numel, nonfinite)
    error = (e - a).abs()
    magnitude = float(e.abs().mean())
    eager_max = float(e.abs().max())
    bound = tolerance.atol + tolerance.rtol * torch.clamp(e.abs(), min=magnitude)
    with torch.no_grad():
        ratio = torch.where(bound > 0, error / torch.where(bound > 0, bound, 1.0), torch.where(error > 0, math.inf, 0.0))
    worst = int(ratio.argmax())
    norms = float(e.norm() * a.norm())
    if norms == 0.0:
        cosine = 1.0 if float(e.norm()) == float(a.norm()) else 0.0
    else:
        cosine = max(-1.0, min(1.0, float(torch.dot(e, a) / norms)))
    e_norm = float(e.norm())
    relative = float(error.norm()) / e_norm if e_norm > 0 else (0.0 if float(error.max()) == 0 else math.inf)
    values = e.unique()
    return Measure(
        dtype=dtype_name(expected),
        tolerance=tolerance,
        max_abs_error=float(error.max()),
        cosine=cosine,
        worst_excess=float(ratio[worst]),
        worst_at=float(e[worst].abs()),
        magnitude=magnitude,
        eager_max=eager_max,
        relative_error=relative,
        zero_passes=bool((e.abs() <= bound).all()),
        eager_constant=float(values[0]) if values.numel() == 1 and e.numel() > 1 and eager_max > 0 else None,
        program_zero=bool((a == 0).all()) and eager_max > 0,
        mismatched=int((ratio > 1.0).sum()),
        numel=numel,
        nonfinite=nonfinite,
    )


def compare(expected: Any, actual: Any) -> tuple[float, float]:
    """Max absolute error and cosine similarity of two tensors (as float64)."""
    found = measure(expected, actual, EXACT)
    return found.max_abs_error, found.cosine


FAR_BELOW = 1e-3
"""An eager output whose largest element is this share of the tolerance's ``atol`` or less is
far below what the tolerance can tell apart (torchvision's mobilenets with random weights: 1e-9
against 1e-3): no comparison at that scale says anything about the program."""


def degenerate(found: Measure) -> str:
    """Why a comparison cannot tell a wrong program from a right one, in words; empty if it can:
    eager's output all zeros, constant, or far below the tolerance (:data:`FAR_BELOW`). Integer
    and bool outputs are never degenerate."""
    if not is_float(found.dtype) or found.numel == 0:
        return ""
    if found.eager_max == 0.0:
        return "eager PyTorch's output is all zeros: any program that returns zeros passes"
    if found.eager_constant is not None:
        return (f"eager PyTorch's output is the constant {found.eager_constant:.4g} in every element: the check cannot "
                "tell this program from one that ignores its inputs")
    if found.eager_max <= FAR_BELOW * found.tolerance.atol:
        return (f"eager PyTorch's output is at most {found.eager_max:.2g} in magnitude, far below the tolerance "
                f"(atol {found.tolerance.atol:g}): an all-zero output would pass")
    return ""


def only_cosine(found: Measure) -> str:
    """Why only the cosine similarity checks an output (every eager element within ``atol`` of
    zero: the element-wise bound cannot fail), in words; empty otherwise."""
    if not is_float(found.dtype) or not found.zero_passes or found.eager_max == 0.0:
        return ""
    return (f"eager PyTorch's output is at most {found.eager_max:.2g} in magnitude, within the tolerance's atol "
            f"{found.tolerance.atol:g}: the element-wise bound cannot fail here, only the cosine similarity checks it")


def _bound_words(found: Measure) -> str:
    t = found.tolerance
    if t.atol == 0 and t.rtol == 0:
        return f"{found.dtype}: exact"
    return (f"{found.dtype}: |a - e| <= atol {t.atol:g} + rtol {t.rtol:g} * max(|e|, mean |e| {found.magnitude:.3g}), "
            f"cosine >= {t.min_cosine:g}")


def judge(found: Measure) -> tuple[Verdict, str, bool]:
    """(verdict, reason, wrong): ``wrong`` when the output is far from eager's (no tolerance fixes it)."""
    reason = degenerate(found)
    if found.nonfinite:
        return Verdict.FAILED, found.nonfinite, True
    if not is_float(found.dtype):
        if found.within:
            return Verdict.PASSED, "", False
        share = found.mismatched / max(found.numel, 1)
        return Verdict.FAILED, f"{found.mismatched} of {found.numel} elements differ", share > 0.5
    if found.within and reason:
        if found.program_zero:
            reason += "; the program's output is all zeros"
        return Verdict.PROVES_NOTHING, reason, False
    if found.program_zero:
        return Verdict.FAILED, f"the program's output is all zeros, eager PyTorch's is not (up to {found.eager_max:.3g})", True
    if found.cosine < WRONG_COSINE or found.relative_error >= WRONG_RELATIVE_ERROR:
        return Verdict.FAILED, "", True
    if found.within and found.cosine >= found.tolerance.min_cosine:
        return Verdict.PASSED, only_cosine(found), False
    return Verdict.FAILED, "", False


def checked_figures(program: ProgramPlan, method: str, sizes: dict[str, int], expected: list[Any], actual: list[Any], how: str = "",
                    names: list[str] | None = None, *, data: str = "random", samples: int = 0,
                    inputs: tuple[Any, ...] = ()) -> list[OutputFigures]:
    """Compare a method's outputs with eager PyTorch's at ``sizes`` (or on ``samples`` samples),
    leaf by leaf, each held to its dtype's tolerance; raise past it (``how`` says how the program
    ran, for the message): :class:`WrongProgram` when an output is far from eager's, else
    CheckError. Returns each output's figures (a degenerate one with ``proves-nothing``)."""
    where = f"method {method!r} " + (f"on {samples} sample{'s' if samples != 1 else ''}" if data == "samples" else f"at {sizes}")
    _same_layout(program.name, where, expected, actual, names)
    settings = program.check_settings()
    figures = []
    for index, (e, a) in enumerate(zip(expected, actual)):
        found = measure(e, a, settings.for_dtype(dtype_name(e)))
        top1, clear = top1_agreement(e, a, found) if data == "samples" else (None, None)
        verdict, reason, wrong = judge(found)
        if clear is not None and clear < WRONG_TOP1 and verdict is not Verdict.FAILED:
            verdict, reason, wrong = (Verdict.FAILED, f"its top class agrees with eager PyTorch's on {clear:.0%} of the rows "
                                      "where eager's top class leads clearly", True)
        if verdict is Verdict.FAILED:
            raise refusal(program, where, _slot(index, names), found, reason, wrong, how, method, inputs, index)
        figures.append(OutputFigures(
            method, dict(sizes) if data == "random" else {}, index, found.max_abs_error, found.cosine,
            dtype=found.dtype, atol=found.tolerance.atol, rtol=found.tolerance.rtol, min_cosine=found.tolerance.min_cosine,
            worst_excess=found.worst_excess, magnitude=found.magnitude, data=data, samples=samples, top1=top1,
            verdict=verdict, reason=reason,
        ))
    return figures


def refusal(program: ProgramPlan, where: str, slot: str, found: Measure, reason: str, wrong: bool, how: str = "",
            method: str = "", inputs: tuple[Any, ...] = (), index: int = 0) -> CheckError:
    """The error of an output that :func:`judge` failed: :class:`WrongProgram` when ``wrong`` (far
    from eager: no tolerance fixes it), else a tolerance miss with its figures and the way to
    loosen the check. ``where`` names the method and its inputs, ``slot`` the output."""
    figures = f"max abs error {found.max_abs_error:.3g}, cosine {found.cosine:.6f}"
    if wrong:
        said = reason or (f"cosine {found.cosine:.6f} (a right program measures near 1; under {WRONG_COSINE:g} is another "
                          f"function)" if found.cosine < WRONG_COSINE else
                          f"its error is {found.relative_error:.3g} times the size of the output itself (RMS)")
        return wrong_program(program, f"{where} output {slot}", how,
                             f"{said}; {figures} on outputs of mean magnitude {found.magnitude:.3g}",
                             method=method, inputs=inputs, output=index)
    excess = "" if math.isinf(found.worst_excess) else f" ({found.worst_excess:.3g}x its bound at an element of magnitude {found.worst_at:.3g})"
    what = reason or f"{figures}{excess}, {found.mismatched} of {found.numel} elements beyond the bound"
    return CheckError(
        f"{where} output {slot} differs from eager PyTorch{how}: {what}; tolerance {_bound_words(found)}; "
        f"if this error is expected of the backend, loosen programs.{program.name}.check (atol, rtol, min_cosine)",
        location=f"programs.{program.name}",
    )


def wrong_program(program: ProgramPlan, subject: str, how: str, said: str, *, method: str = "",
                  inputs: tuple[Any, ...] = (), output: int = 0) -> WrongProgram:
    """``subject`` (``method 'forward' at {'batch': 2} output 0``) computes something else than
    eager PyTorch (``how`` it ran), as ``said`` shows: the line says it is not a tolerance problem
    and never advises loosening."""
    return WrongProgram(
        f"{subject}: the program computes something else than eager PyTorch{how}: {said}; this is not a tolerance "
        f"problem: loosening programs.{program.name}.check would ship a wrong program",
        location=f"programs.{program.name}", method=method, inputs=inputs, output=output,
    )


def top1_agreement(expected: Any, actual: Any, found: Measure) -> tuple[float | None, float | None]:
    """For class scores (a float output whose last dim is > 1): the share of all rows whose top
    class is eager's (the figure reported, quantized programs' as float ones'), and the share among
    rows where eager's top class leads the next by more than twice the tolerance's bound (what
    judges a program wrong: a near tie can go either way in a right one; None if no row leads so
    clearly, as under a quantized program's wide tolerance). ``(None, None)`` for other outputs."""
    import torch

    if not is_float(found.dtype) or expected.dim() < 1 or expected.shape[-1] < 2 or expected.numel() == 0:
        return None, None
    e = expected.detach().to(torch.float64).reshape(-1, expected.shape[-1])
    a = actual.detach().to(torch.float64).reshape(-1, expected.shape[-1])
    top2 = e.topk(2, dim=-1).values
    bound = found.tolerance.atol + found.tolerance.rtol * torch.clamp(top2[:, 0].abs(), min=found.magnitude)
    clear = (top2[:, 0] - top2[:, 1]) > 2 * bound
    agree = e.argmax(-1) == a.argmax(-1)
    return float(agree.double().mean()), float(agree[clear].double().mean()) if bool(clear.any()) else None


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



Inputs = tuple[Any, ...]


def check_program(model: Any, program: ProgramPlan, pte: Path, ptd: Path | None, how: str = "",
                  direction: DirectionBound | None = None, samples: dict[str, list[Inputs]] | None = None) -> list[OutputFigures]:
    """Run ``pte`` in ExecuTorch's runtime as a device would and compare every output with ``model``'s.

    ``how`` says what ``model`` is, for messages; ``direction``: also compare each output's
    cosine with another model's (no figures: ``model``'s are the program's); ``samples``: method
    name -> its samples (:func:`ptebuild.lowering.samples.load_samples`), run after the
    generated inputs. Raises CheckError naming the method, output and figures of the first
    mismatch (:class:`WrongProgram`, :class:`OrderDependent` for those cases).
    """
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
    del loaded

    def load() -> Any:
        return Runtime.get().load_program(pte, data_path=ptd)

    figures: list[OutputFigures] = []
    for method in program.methods:
        runner = _MethodRunner(load, model, program, method, how, (samples or {}).get(method.name, []))
        figures += runner.check(direction, runner.samples)
    return figures


def run_orders(sizes: Sequence[dict[str, int]]) -> list[dict[str, int]]:
    """The sizes as a device varying its inputs runs them on one loaded method: from the smallest,
    growing with each size twice in a row, then shrinking back, the smallest twice at the end. Every
    step between neighbouring sizes, both ways, and every size after itself, each once (the first run
    is the smallest size's fresh run). A static method (one size) runs twice."""
    growing = sorted(sizes, key=lambda s: (math.prod(s.values()), sorted(s.items())))
    return [growing[0], *(s for s in growing[1:] for _ in (0, 1)), *growing[-2::-1], growing[0]]


class _MethodRunner:
    """One method of a loaded program, run against the eager model (what :func:`check_program` does per method)."""

    def __init__(self, load_program: Any, model: Any, program: ProgramPlan, method: MethodPlan, how: str,
                 samples: list[Inputs]) -> None:
        self.load_program, self.model, self.program, self.method, self.how = load_program, model, program, method, how
        self.samples = samples
        self.location = f"programs.{program.name}"

    def load(self) -> Any:
        """The method, in a freshly loaded program."""
        with runtime_log() as log:
            try:
                return self.load_program().load_method(self.method.name)
            except Exception as exc:
                raise runtime_error(f"to load method {self.method.name!r}", exc, log, self.program.name) from exc

    def execute(self, executable: Any, inputs: Inputs, what: str) -> list[Any]:
        with runtime_log() as log:
            try:
                return flatten_outputs(list(executable.execute(flat_inputs(inputs))))
            except Exception as exc:
                raise runtime_error(f"to run method {self.method.name!r} {what}", exc, log, self.program.name) from exc

    def eager(self, inputs: Inputs) -> tuple[list[Any], list[str]]:
        import torch

        with torch.no_grad():
            result = call_method(self.model, self.method, inputs, self.program.model)
        return flatten_outputs(result), output_names(result)

    def check(self, direction: DirectionBound | None, samples: list[Inputs]) -> list[OutputFigures]:
        method, program = self.method, self.program
        sizes_list = check_sizes(method)
        inputs = {_key(s): check_inputs(program, method, s, self.samples) for s in sizes_list}
        before, saved = versions(self.model), saved_buffers(self.model)
        first = self.eager(inputs[_key(sizes_list[0])])
        if versions(self.model) != before:
            restore_buffers(self.model, saved)
            return self.check_in_lockstep(sizes_list, inputs, direction, samples)
        del saved
        eager = {_key(sizes_list[0]): first}
        figures, fresh = [], {}
        orders = run_orders(sizes_list)
        executable = self.load()  # the smallest size's fresh run is the first of the orders below
        for sizes in sizes_list:  # each size on a freshly loaded program: what nothing earlier touched
            if _key(sizes) not in eager:
                eager[_key(sizes)] = self.eager(inputs[_key(sizes)])
            expected, names = eager[_key(sizes)]
            loaded = executable if _key(sizes) == _key(orders[0]) else self.load()
            actual = self.execute(loaded, inputs[_key(sizes)], f"at {sizes}")
            figures += checked_figures(program, method.name, sizes, expected, actual, how=self.how, names=names,
                                       inputs=inputs[_key(sizes)])
            self.check_direction(direction, sizes, inputs[_key(sizes)], actual, names)
            fresh[_key(sizes)] = actual
        history: list[dict[str, int]] = [orders[0]]
        for sizes in orders[1:]:  # then as a device varying its inputs runs them
            actual = self.execute(executable, inputs[_key(sizes)], f"at {sizes}")
            history.append(sizes)
            self.check_same(sizes, history, actual, fresh[_key(sizes)], eager[_key(sizes)][0])
        return figures + self.check_samples(executable, samples, "after the generated inputs")

    def check_in_lockstep(self, sizes_list: list[dict[str, int]], inputs: dict[tuple[tuple[str, int], ...], Inputs],
                          direction: DirectionBound | None, samples: list[Inputs]) -> list[OutputFigures]:
        """A stateful model (its eager call changes its buffers, restored since): one loaded method,
        the sizes in order, each run beside one eager call, so that both states move together."""
        figures = []
        executable = self.load()
        for sizes in sizes_list:
            expected, names = self.eager(inputs[_key(sizes)])
            actual = self.execute(executable, inputs[_key(sizes)], f"at {sizes}")
            figures += checked_figures(self.program, self.method.name, sizes, expected, actual, how=self.how, names=names,
                                       inputs=inputs[_key(sizes)])
            self.check_direction(direction, sizes, inputs[_key(sizes)], actual, names)
        return figures + self.check_samples(executable, samples, "after the generated inputs")

    def check_direction(self, direction: DirectionBound | None, sizes: dict[str, int], inputs: Inputs, actual: list[Any],
                        names: list[str]) -> None:
        if direction is None:
            return
        import torch

        with torch.no_grad():
            other = flatten_outputs(call_method(direction.model, self.method, inputs, self.program.model))
        where = f"method {self.method.name!r} at {sizes}"
        for index, _, cosine in compare_outputs(self.program.name, where, other, actual, names):
            if cosine < direction.min_cosine:
                raise CheckError(
                    f"{where} output {_slot(index, names)} points away from {direction.name}'s: cosine "
                    f"{cosine:.6f} (min {direction.min_cosine:g}); {direction.fix}",
                    location=self.location,
                )

    def check_same(self, sizes: dict[str, int], history: list[dict[str, int]], actual: list[Any], fresh: list[Any],
                   expected: list[Any]) -> None:
        """The run's outputs are the fresh run's for the same inputs, within the dtype's own rounding."""
        for index, (a, f, e) in enumerate(zip(actual, fresh, expected)):
            dtype = dtype_name(e)
            floor = DTYPE_TOLERANCES.get(dtype, EXACT)
            moved = measure(f, a, floor)
            if moved.within:
                continue
            now, then = measure(e, a, floor), measure(e, f, floor)
            earlier = history[:-1]
            after = f"after {earlier[-1]}" if earlier else "first"
            raise OrderDependent(
                f"method {self.method.name!r} answers depend on what ran before it on the loaded program: at {sizes} "
                f"{after}, output {index} moves by up to {moved.max_abs_error:.3g} from a fresh run of the same inputs "
                f"(error against eager PyTorch {now.max_abs_error:.3g}, {then.max_abs_error:.3g} when run first); runs in "
                f"this order: {' -> '.join(_words(s) for s in history)}. A device that varies its inputs would get these "
                "answers: this is the runtime's fault (ExecuTorch or its delegate), not the model's and not a tolerance "
                "problem; give the method fixed sizes (no dynamic dims), or another backend or quantization, and "
                "report it upstream with the .pte",
                location=self.location,
            )

    def check_samples(self, executable: Any, samples: list[Inputs], when: str) -> list[OutputFigures]:
        """Run the samples on ``executable`` and hold each output, over all samples, to its tolerance."""
        if not samples:
            return []
        expected_runs, actual_runs, names = [], [], None
        for index, sample in enumerate(samples):
            expected, names = self.eager(sample)
            actual = self.execute(executable, sample, f"on sample {index}")
            _same_layout(self.program.name, f"method {self.method.name!r} on sample {index}", expected, actual, names)
            expected_runs.append(expected)
            actual_runs.append(actual)
        expected = [concat_outputs([run[i] for run in expected_runs]) for i in range(len(expected_runs[0]))]
        actual = [concat_outputs([run[i] for run in actual_runs]) for i in range(len(actual_runs[0]))]
        return checked_figures(self.program, self.method.name, {}, expected, actual, how=self.how, names=names,
                               data="samples", samples=len(samples), inputs=samples[0])


def _key(sizes: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(sizes.items()))


def _words(sizes: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sizes.items()) or "the example"


def concat_outputs(tensors: list[Any]) -> Any:
    """One output over several samples: rows of its last dim (class scores stay rows), else flat."""
    import torch

    if all(t.dim() >= 1 for t in tensors) and len({t.shape[-1] for t in tensors}) == 1:
        return torch.cat([t.reshape(-1, t.shape[-1]) for t in tensors])
    return torch.cat([t.reshape(-1) for t in tensors])
