"""A dynamic dim the model cannot take, explained as the manifest key to change.

torch.export refuses a dynamic dim that the traced code pins (``Constraints violated (seq)!``)
and suggests new declarations, in its own words (torch 2.13)::

    - You marked seq as dynamic but your code specialized it to be a constant (2). ...
    - Not all values of seq = L['x'].size()[1] in the specified range seq <= 32 satisfy the generated guard ...
    Suggested fixes:
      seq = 2                        (the code fixes the size: a loop over it, a branch on it)
      seq = Dim('seq', max=16)       (the code takes a narrower range)
      other = seq                    (two dims must be equal)
      _seq = Dim('_seq', max=16)     (the size must be a multiple: seq = 2*_seq)
      seq = 2*_seq

:func:`explain_dims` turns the suggestions into one :class:`~ptebuild.errors.ManifestError`
(exit 2) located at the first input whose shape names the dim, saying what the model takes and
which key to change. A dim pinned in a model that holds a recurrent layer (a GRU, an LSTM, an
RNN or their cells: :func:`recurrent_layers`) names the layer: torch.export unrolls its steps
over the sequence into a fixed count, whatever the example. Text that is no constraint
violation gives None (the caller reports the export's failure as before). Parses text and reads
class names: imports no torch.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from ptebuild.errors import ManifestError
from ptebuild.plan import DimPlan, InputPlan, MethodPlan

_HEADER = re.compile(r"Constraints violated \(([\w, ]+)\)!")
_FIX = re.compile(r"^\s*(\w+) = (.+?)\s*$")
_DIM = re.compile(r"^Dim\('(\w+)'(?:, min=(\d+))?(?:, max=(\d+))?\)$")
_MULTIPLE = re.compile(r"^(\d+)\*(\w+)$")


@dataclass(frozen=True)
class Fix:
    """One of torch's suggested declarations: ``name = expression``."""

    name: str
    expression: str


def suggested_fixes(text: str) -> list[Fix] | None:
    """torch's suggested fixes in ``text``; None when ``text`` is no constraint violation."""
    if not _HEADER.search(text):
        return None
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "Suggested fixes:"), None)
    fixes: list[Fix] = []
    if start is None:
        return fixes
    for line in lines[start + 1:]:
        found = _FIX.match(line)
        if not found:
            break
        fixes.append(Fix(found[1], found[2]))
    return fixes


def _shapes(where: str, specs: tuple[InputPlan, ...]) -> Iterator[tuple[str, InputPlan]]:
    for index, spec in enumerate(specs):
        at = f"{where}[{index}]"
        if spec.items:
            yield from _shapes(f"{at}.items", spec.items)
        elif spec.shape:
            yield at, spec


def _range(dim: DimPlan) -> str:
    return f"[{dim.min}, {dim.max}]"


_RECURRENT_BASES = frozenset({"RNNBase", "RNNCellBase"})
"""torch.nn's bases of GRU, LSTM and RNN, and of their cells (a step a Python loop calls)."""


def recurrent_layers(model: object) -> list[tuple[str, str]]:
    """``(name, class)`` of each recurrent layer of ``model`` (a ``torch.nn.Module``): the
    subclasses of torch.nn's ``RNNBase`` and ``RNNCellBase``, named as ``named_modules`` names them."""
    found = []
    for name, module in getattr(model, "named_modules", list)():
        if any(base.__name__ in _RECURRENT_BASES and base.__module__.startswith("torch.nn") for base in type(module).__mro__):
            found.append((name or "(the model)", type(module).__name__))
    return found


def _recurrent_words(layers: list[tuple[str, str]]) -> str:
    shown = ", ".join(f"{cls} {name!r}" for name, cls in layers[:3]) + (f" and {len(layers) - 3} more" if len(layers) > 3 else "")
    return f"the model's {shown} {'runs' if len(layers) == 1 else 'run'} one step per element of the sequence"


def explain_dims(text: str, method: MethodPlan, model: str, recurrent: list[tuple[str, str]] | None = None) -> ManifestError | None:
    """The ManifestError for torch.export's constraint violation in ``text`` on ``method``'s
    dynamic dims, or None when ``text`` is none (or names no dim of the method). ``recurrent``:
    the model's recurrent layers (:func:`recurrent_layers`), named where a dim is pinned."""
    fixes = suggested_fixes(text)
    if fixes is None:
        return None
    dims = {dim.name: dim for dim in method.dims}
    by_name = {fix.name: fix.expression for fix in fixes}
    header = _HEADER.search(text)
    named = [n.strip() for n in header[1].split(",")] if header else []
    said = []
    for fix in fixes:
        if fix.name not in dims:
            continue
        dim, expression = dims[fix.name], fix.expression
        if expression.isdigit() and recurrent:
            said.append(
                f"dim {dim.name!r} cannot vary: {_recurrent_words(recurrent)}, and torch.export unrolls those steps "
                f"into a fixed count ({expression}); give the inputs the fixed size {expression} in place of "
                f"{dim.name!r} (a program per length you ship, if there are several), or run the recurrence outside "
                "the program (a method for one step, its state an input and an output)"
            )
        elif expression.isdigit():
            said.append(
                f"dim {dim.name!r} cannot vary: the model's code makes it the constant {expression} (reading the size "
                f"as a number: a Python loop or a branch on it); give the inputs the fixed size {expression} in place of "
                f"{dim.name!r}, or change the model"
                + (f"; if it takes other sizes, trace a larger example ({dim.name}'s example key in dims): torch.export "
                   f"fixes a size that the code turns into 1" if int(expression) == dim.example < dim.max else "")
            )
        elif (found := _DIM.match(expression)) is not None:
            low, high = int(found[2] or dim.min), int(found[3] or dim.max)
            said.append(
                f"the model takes dim {dim.name!r} only in [{low}, {high}], not the declared {_range(dim)}; declare "
                f"{{ min = {low}, max = {high} }} for it in dims"
            )
        elif expression in dims:
            said.append(
                f"dims {dim.name!r} and {expression!r} must be equal for this model; use {expression!r} in the shapes "
                f"in place of {dim.name!r}"
            )
        elif (found := _MULTIPLE.match(expression)) is not None:
            base = _DIM.match(by_name.get(found[2], ""))
            bound = f" up to {int(found[1]) * int(base[3])}" if base is not None and base[3] else ""
            said.append(
                f"the model takes dim {dim.name!r} only in multiples of {found[1]}{bound} (declared {_range(dim)}); "
                f"declare multiple_of = {found[1]} for it in dims (min, max and example multiples of it)"
            )
    if not said:
        unknown = [n for n in named if n in dims]
        if not unknown:
            return None
        said.append(f"the model cannot take dim {unknown[0]!r} in {_range(dims[unknown[0]])} (torch.export: "
                    f"{' '.join(line.strip() for line in text.splitlines()[:3])})")
    first = next(n for n in [*(f.name for f in fixes), *named] if n in dims)
    where = f"models.{model}.methods.{method.name}.inputs"
    location = next((f"{at}.shape" for at, spec in _shapes(where, method.inputs) if first in spec.shape), where)
    return ManifestError("; ".join(said) + " (torch.export, tracing the example inputs)", location=location)
