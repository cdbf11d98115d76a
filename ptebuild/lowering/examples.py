"""Example inputs of a method, generated deterministically from the model's seed.

An input is a tensor, a scalar (the value the manifest gives: torch.export specialises on it),
or a tuple, list or dict of inputs (a recurrent state ``(h, c)``, a dict of observations);
:func:`flat_inputs` gives the leaves in the order torch.export and ExecuTorch's runtime take them.

Runs in a worker: imports torch.
"""

from __future__ import annotations

import zlib
from typing import Any

from ptebuild.plan import InputPlan, MethodPlan

TORCH_DTYPES = {
    "float32": "float32",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "int32": "int32",
    "int64": "int64",
    "int8": "int8",
    "uint8": "uint8",
    "bool": "bool",
}


def _method_seed(seed: int, method: str, sizes: dict[str, int]) -> int:
    salt = f"{method}:{sorted(sizes.items())}".encode()
    return (seed * 1_000_003 + zlib.crc32(salt)) % (2**63)


def make_inputs(method: MethodPlan, seed: int, sizes: dict[str, int] | None = None) -> tuple[Any, ...]:
    """Tensors for ``method``'s inputs; ``sizes`` picks dynamic dim sizes (default: the examples)."""
    import torch

    sizes = {dim.name: dim.example for dim in method.dims} | (sizes or {})
    generator = torch.Generator().manual_seed(_method_seed(seed, method.name, sizes))
    return tuple(_make_input(spec, sizes, generator) for spec in method.inputs)


def _make_input(spec: InputPlan, sizes: dict[str, int], generator: Any) -> Any:
    """One input: a tensor, a scalar (its declared value), or a tuple, list or dict of inputs,
    each made in order from the one generator (a flat method's tensors are what they always were)."""
    import torch

    if spec.kind == "scalar":
        return spec.value
    if spec.kind == "tuple":
        return tuple(_make_input(item, sizes, generator) for item in spec.items)
    if spec.kind == "list":
        return [_make_input(item, sizes, generator) for item in spec.items]
    if spec.kind == "dict":
        return {item.name: _make_input(item, sizes, generator) for item in spec.items}
    shape = tuple(sizes[d] if isinstance(d, str) else d for d in spec.shape)
    dtype = getattr(torch, TORCH_DTYPES[spec.dtype])
    if spec.dtype == "bool":
        return torch.rand(shape, generator=generator) < 0.5
    if dtype.is_floating_point:
        values = torch.randn(shape, generator=generator)
        if spec.low is not None or spec.high is not None:
            low = spec.low if spec.low is not None else 0.0
            high = spec.high if spec.high is not None else 1.0
            values = low + (high - low) * torch.rand(shape, generator=generator)
        return values.to(dtype)
    low = int(spec.low) if spec.low is not None else 0
    high = int(spec.high) if spec.high is not None else 10
    return torch.randint(low, high, shape, generator=generator, dtype=dtype)


def check_sizes(method: MethodPlan) -> list[dict[str, int]]:
    """The dynamic dim sizes a program is checked at: the example, then each dim's min and max."""
    example = {dim.name: dim.example for dim in method.dims}
    sizes = [example]
    for extreme in ("min", "max"):
        candidate = {dim.name: getattr(dim, extreme) for dim in method.dims}
        if candidate not in sizes:
            sizes.append(candidate)
    return sizes


def flat_inputs(inputs: tuple[Any, ...]) -> list[Any]:
    """The leaves of a method's inputs (tensors and scalars) in torch.export's order: what
    ExecuTorch's ``Method.execute`` takes."""
    from torch.utils._pytree import tree_leaves

    return list(tree_leaves(tuple(inputs)))
