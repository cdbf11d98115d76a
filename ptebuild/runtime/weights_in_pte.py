"""The weights a ``.pte`` carries inside itself: what a program with a data name should have put in its ``.ptd``.

Read from the file (no torch): every named data entry of the ``.pte`` (a delegate's weight, keyed
as the delegate keys it), less the entries its backend says are code (``is_code``: a CUDA
program's compiled ``.so``), and every constant tensor of more than one element stored in the
``.pte`` (a value whose data is in the constant segment, not EXTERNAL; a 0-d constant is a
scalar of the graph), named by method, value index, dtype and shape, as the
file keeps no parameter names for them (ExecuTorch leaves a lifted tensor constant, made inside
``forward``, in the ``.pte``: "closer to code than data").

A program with a data name whose ``.pte`` still holds weights names them in the build's report
(a warning) and in the build record (``weights_in_pte``), never silently.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ptebuild.runtime.pte_file import TensorDataLocation, open_pte
from ptebuild.runtime.pte_inspection import DTYPES


@dataclass(frozen=True)
class WeightInPte:
    name: str
    """A named data key, or ``forward value 7 float32[2, 3]`` for a constant tensor."""
    size: int
    """Bytes (a constant tensor's: its elements times its dtype's size, where known; else 0)."""

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "bytes": self.size}


_ITEM_SIZE = {"uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "float16": 2, "float32": 4, "float64": 8,
              "bool": 1, "bfloat16": 2}


def weights_in_pte(path: str | Path, is_code: Callable[[str], bool] = lambda _key: False) -> list[WeightInPte]:
    """The weights stored inside the ``.pte`` at ``path`` (named data, then constant tensors).

    Raises:
        FormatError: the file is not a readable ``.pte``.
    """
    found = []
    with open_pte(path) as reader:
        for entry in reader.named_data():
            key = entry.key()
            if key is None or is_code(key):
                continue
            index = entry.segment_index()
            size = reader.segments[index].size if 0 <= index < len(reader.segments) else 0
            found.append(WeightInPte(key, size))
        seen: set[int] = set()
        for plan in reader.execution_plans():
            for number, value in enumerate(plan.values()):
                tensor = value.tensor
                if tensor is None or tensor.data_buffer_idx <= 0 or tensor.data_buffer_idx in seen:
                    continue
                if tensor.extra is not None and tensor.extra.location == TensorDataLocation.EXTERNAL:
                    continue
                seen.add(tensor.data_buffer_idx)
                dtype = DTYPES.get(tensor.scalar_type, f"type {tensor.scalar_type}")
                elements = 1
                for size in tensor.sizes:
                    elements *= size
                if elements <= 1:
                    continue  # a scalar of the graph (``x * 0.5`` as a 0-d tensor), not a weight
                found.append(WeightInPte(f"{plan.name()} value {number} {dtype}{list(tensor.sizes)}",
                                         elements * _ITEM_SIZE.get(dtype, 0)))
    return found


def describe(weights: list[WeightInPte], data_name: str, backend: str, limit: int = 4) -> str:
    """One line: ``2 weights (1.2 KiB) stay inside the .pte, not in 'w.ptd' (...): a, b``."""
    total = sum(w.size for w in weights)
    names = ", ".join(w.name for w in weights[:limit]) + (f" (and {len(weights) - limit} more)" if len(weights) > limit else "")
    one = len(weights) == 1
    return (
        f"{len(weights)} weight{'' if one else 's'} ({total} bytes) {'stays' if one else 'stay'} inside the .pte, not in "
        f"'{data_name}.ptd' (the {backend} lowering cannot place {'it' if one else 'them'} there): {names}"
    )
