"""Do a method's declared inputs fit its model? An eager failure explained as the manifest key that is wrong.

When torch.export of a method fails, the model is called eagerly on the same example inputs
(:func:`explain_misfit`). If eager PyTorch fails too, with one of the errors torch's own operators
raise for an input that does not fit (the table :data:`MISFITS`: a shape or a dtype the layer
does not take), the failure is the
manifest's: a :class:`~ptebuild.errors.ManifestError` (exit 2) located at the input's
``shape`` or ``dtype`` (``models.M.methods.F.inputs[0].shape``), giving the declared
shape and torch's words for what the model expected. The input is the one whose shape or dtype
the error names (a single tensor input is always it); when none or several are, the error is at
the ``inputs`` list with every input's shape. Anything else (the model's own ``ValueError``, an
export limitation) is left to the caller, which reports the export's failure as before.

Runs in a worker: imports torch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ptebuild.errors import ManifestError
from ptebuild.lowering.binding import Binding
from ptebuild.plan import InputPlan, MethodPlan


@dataclass(frozen=True)
class Misfit:
    """An error torch raises for an input that does not fit, and the input key it points at."""

    pattern: re.Pattern[str]
    key: str
    """``shape`` or ``dtype``: the input's key to change."""
    fix: str


MISFITS = (
    Misfit(re.compile(r"mat1 and mat2 shapes cannot be multiplied"), "shape", "declare the shape the model takes"),
    Misfit(re.compile(r"expected input\[.*\] to have \d+ channels"), "shape", "declare the channels the model takes"),
    Misfit(re.compile(r"Expected \d+D .*input to \w+, but got input of size"), "shape", "declare as many dims as the layer takes"),
    Misfit(re.compile(r"expected input with shape \[.*\], but got input of size"), "shape", "declare the shape the model takes"),
    Misfit(re.compile(r"must be equal to input_size\. Expected \d+, got \d+"), "shape", "declare the features the model takes"),
    Misfit(re.compile(r"The size of tensor a \(\d+\) must match the size of tensor b \(\d+\)"), "shape", "declare shapes that broadcast"),
    Misfit(re.compile(r"shape '\[[-\d, ]*\]' is invalid for input of size \d+"), "shape", "declare the shape the model reshapes"),
    Misfit(re.compile(r"should contain \d+ elements not \d+"), "shape", "declare the channels the model takes"),
    Misfit(re.compile(r"was expecting embedding dimension of \d+, but got \d+"), "shape", "declare the embedding size the model takes"),
    Misfit(re.compile(r"Dimension out of range|too many indices for tensor of dimension"), "shape",
           "declare as many dims as the model indexes"),
    Misfit(re.compile(r"to have one of the following scalar types: .*; but got torch\.\w+"), "dtype", "declare the dtype the model takes"),
    Misfit(re.compile(r"must have the same dtype, but got \w+ and \w+|expected scalar type \w+ but found \w+"
                      r"|Input type \(.*\) and (weight|bias) type \(.*\) should be the same"), "dtype",
           "declare the dtype the model takes"),
)
"""torch's errors for an input that does not fit its model (seen with torch 2.13: ``Linear``,
``Conv2d``, ``LayerNorm``, ``BatchNorm2d``, ``LSTM``, ``MultiheadAttention``, ``Embedding``,
broadcasting, ``view``)."""

_TORCH_DTYPES = {
    "Float": "float32", "Half": "float16", "BFloat16": "bfloat16", "Double": "float64", "Long": "int64", "Int": "int32",
    "Char": "int8", "Byte": "uint8", "Bool": "bool",
}


def _leaves(where: str, specs: tuple[InputPlan, ...], values: tuple[Any, ...] | list[Any]) -> Iterator[tuple[str, InputPlan, Any]]:
    """``(location, spec, value)`` of every tensor input, also inside tuples, lists and dicts."""
    for index, (spec, value) in enumerate(zip(specs, values)):
        at = f"{where}[{index}]"
        if spec.items:
            inner = [value[item.name] for item in spec.items] if isinstance(value, dict) else list(value)
            yield from _leaves(f"{at}.items", spec.items, inner)
        elif spec.kind == "tensor":
            yield at, spec, value


def _named(text: str, spec: InputPlan, shape: tuple[int, ...]) -> bool:
    """Does torch's error ``text`` name this input's shape (``[1, 8]``; ``(1x8 and ...`` for the
    matrix a linear layer makes of it) or its dtype (other than the default float32)?"""
    compact = text.replace(" ", "")
    forms = ["[" + ",".join(map(str, shape)) + "]"]
    if len(shape) >= 2:
        forms.append(f"({math.prod(shape[:-1])}x{shape[-1]}and")
    if any(form in compact for form in forms):
        return True
    mentioned = {_TORCH_DTYPES[w] for w in re.findall(r"\b(" + "|".join(_TORCH_DTYPES) + r")(?:Tensor)?\b", text)}
    return spec.dtype in mentioned and spec.dtype != "float32"


def explain_misfit(function: Any, binding: Binding, method: MethodPlan, model: str, inputs: tuple[Any, ...]) -> ManifestError | None:
    """Call ``function`` eagerly on ``inputs``; if it fails because an input does not fit (:data:`MISFITS`),
    the located ManifestError to raise; else None (eager PyTorch runs, or fails for another reason)."""
    import torch

    try:
        with torch.no_grad():
            binding.call(function, inputs)
        return None
    except Exception as exc:  # the model's own code: anything
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        found = next((m for m in MISFITS if m.pattern.search(text)), None)
        if found is None:
            return None
        cause = f"{type(exc).__name__}: {text}"
    where = f"models.{model}.methods.{method.name}.inputs"
    leaves = list(_leaves(where, method.inputs, inputs))
    if not leaves:
        return None
    shapes = {at: tuple(value.shape) for at, _, value in leaves}
    named = [(at, spec) for at, spec, _ in leaves if _named(text, spec, shapes[at])]
    if len(leaves) == 1:
        named = [(leaves[0][0], leaves[0][1])]
    if len(named) == 1:
        at, spec = named[0]
        what = list(shapes[at]) if found.key == "shape" else spec.dtype
        return ManifestError(f"{what} does not fit the model: {cause} (eager PyTorch, the example inputs); {found.fix}",
                             location=f"{at}.{found.key}")
    listed = ", ".join(f"{spec.name} {list(shapes[at])} {spec.dtype}" for at, spec, _ in leaves)
    return ManifestError(f"the inputs ({listed}) do not fit the model: {cause} (eager PyTorch, the example inputs); {found.fix}",
                         location=where)
