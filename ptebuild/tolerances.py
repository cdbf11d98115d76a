"""How close a program's outputs must be to eager PyTorch's: tolerances by dtype and magnitude.

An output passes its check when, element by element,

    |a - e| <= atol + rtol * max(|e|, mean |e|)

(``a`` the program's output, ``e`` eager PyTorch's, ``mean |e|`` the mean magnitude of that
output), and its cosine similarity with eager's is at least ``min_cosine``. The relative part is
``torch.testing.assert_close``'s ``rtol * |e|`` with one change: it never falls below the
output's mean magnitude. An element near zero that is the sum of large terms carries the
rounding of those terms, not of its own size; a program that computes in float16 or bfloat16
rounds every intermediate value, and the element-wise rule alone would refuse it there.

The tolerance of one output is the looser, part by part, of two tables, then the manifest:

- by the output's dtype (:data:`DTYPE_TOLERANCES`), anchored on ``assert_close``'s defaults:
  its ``atol`` for every float dtype, its ``rtol`` for float32 and float64; for float16 and
  bfloat16, whose programs round each operator's result to 16 bits where eager PyTorch's CPU
  kernels accumulate in float32, 32 units of the dtype's rounding (``32 * eps``). Measured on a
  ``Linear(64,128)-GELU-Linear(128,32)`` MLP (portable and XNNPACK, batch 1, 2, 8): float16 needs
  ``rtol`` 0.0085 and cosine 0.999998, bfloat16 0.054 and 0.99981; a conv net 0.0017 and 0.0076;
- by the backend and its quantization (``Backend.check_defaults``): XNNPACK's float kernels,
  int8, 8da4w... (a float32 program's tolerance is its backend's);
- a manifest's ``check`` table (``atol``, ``rtol``, ``min_cosine``) replaces any part it sets,
  for every output of the program.

Integer and bool outputs compare exactly unless the manifest sets ``atol`` or ``rtol``.

A check that cannot fail proves nothing (:func:`degenerate`): eager PyTorch's output all zeros,
constant, or so small that an all-zero output would pass. And a program far from eager (a
cosine under :data:`WRONG_COSINE`, or a top-1 agreement under :data:`WRONG_TOP1` on class
scores) computes something else: no tolerance would make it right.

Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

WRONG_COSINE = 0.9
"""Under this cosine similarity with eager PyTorch an output is wrong, whatever the tolerance:
every default's floor is 0.97 or above (static int8), and right programs measure above 0.999."""
WRONG_TOP1 = 0.5
"""Under this share of samples whose top class agrees with eager PyTorch's, class scores are wrong."""


@dataclass(frozen=True)
class Tolerance:
    """``|a - e| <= atol + rtol * max(|e|, mean |e|)`` element-wise, and cosine >= ``min_cosine``."""

    atol: float
    rtol: float = 0.0
    min_cosine: float = -1.0

    def looser(self, other: Tolerance) -> Tolerance:
        """Part by part, the looser of the two."""
        return Tolerance(max(self.atol, other.atol), max(self.rtol, other.rtol), min(self.min_cosine, other.min_cosine))

    def to_json(self) -> dict[str, float]:
        return {"atol": self.atol, "rtol": self.rtol, "min_cosine": self.min_cosine}

    def __str__(self) -> str:
        """``atol 1e-05, rtol 1.3e-06, cosine >= 0.99999`` (what a message states)."""
        if self.atol == 0 and self.rtol == 0:
            return "exact"
        return f"atol {self.atol:g}, rtol {self.rtol:g}, cosine >= {self.min_cosine:g}"


FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16")
EXACT = Tolerance(0.0, 0.0, -1.0)
"""Integer and bool outputs: equal, element by element."""

DTYPE_TOLERANCES: Mapping[str, Tolerance] = {
    "float64": Tolerance(atol=1e-7, rtol=1e-7, min_cosine=0.99999),
    "float32": Tolerance(atol=1e-5, rtol=1.3e-6, min_cosine=0.99999),
    "float16": Tolerance(atol=1e-5, rtol=32 * 2.0**-10, min_cosine=0.9999),
    "bfloat16": Tolerance(atol=1e-5, rtol=32 * 2.0**-7, min_cosine=0.999),
}
"""The least tolerance of a whole program's output, by its dtype (the module's text says why)."""


@dataclass(frozen=True)
class CheckSettings:
    """What a program's check holds its outputs to, before any output's dtype is known: the
    backend's default (float32) tolerance and the manifest's overrides (None: not set)."""

    backend: Tolerance
    atol: float | None = None
    rtol: float | None = None
    min_cosine: float | None = None

    def for_dtype(self, dtype: str) -> Tolerance:
        """The tolerance of an output of ``dtype`` (``float32``, ``bfloat16``, ``int64``...)."""
        if dtype in DTYPE_TOLERANCES:
            found = DTYPE_TOLERANCES[dtype].looser(self.backend)
        else:
            found = EXACT
        return Tolerance(
            self.atol if self.atol is not None else found.atol,
            self.rtol if self.rtol is not None else found.rtol,
            self.min_cosine if self.min_cosine is not None else found.min_cosine,
        )


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES
