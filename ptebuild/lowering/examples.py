"""Example inputs of a method, generated deterministically from the model's seed.

An input is a tensor, a scalar (the value the manifest gives: torch.export specialises on it),
or a tuple, list or dict of inputs (a recurrent state ``(h, c)``, a dict of observations);
:func:`flat_inputs` gives the leaves in the order torch.export and ExecuTorch's runtime take them.

A program calibrated on its samples (static quantization: :attr:`~ptebuild.plan.ProgramPlan.
calibrated`) is checked on generated inputs drawn within the samples' ranges (:func:`check_inputs`):
its quantization steps fit the samples, and noise far outside them would measure the calibration,
not the program.

Runs in a worker: imports torch.
"""

from __future__ import annotations

import zlib
from typing import Any

from ptebuild.plan import InputPlan, MethodPlan, ProgramPlan

Range = tuple[Any, Any]
"""A leaf's (low, high): tensors that broadcast to the leaf's shape (floats), or ints."""

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


def make_inputs(method: MethodPlan, seed: int, sizes: dict[str, int] | None = None,
                ranges: list[Range | None] | None = None) -> tuple[Any, ...]:
    """Tensors for ``method``'s inputs; ``sizes`` picks dynamic dim sizes (default: the examples);
    ``ranges`` (:func:`sample_ranges`, one per leaf) draws each leaf uniformly within its range."""
    import torch

    sizes = {dim.name: dim.example for dim in method.dims} | (sizes or {})
    generator = torch.Generator().manual_seed(_method_seed(seed, method.name, sizes))
    leaf_ranges = iter(ranges) if ranges is not None else None
    return tuple(_make_input(spec, sizes, generator, leaf_ranges) for spec in method.inputs)


def check_inputs(program: ProgramPlan, method: MethodPlan, sizes: dict[str, int], samples: list[tuple[Any, ...]] | None) -> tuple[Any, ...]:
    """The generated inputs the check (and the ``.bpte``) runs at ``sizes``: within the samples'
    ranges for a program calibrated on them, else as the manifest declares them."""
    ranges = sample_ranges(method, samples) if program.calibrated and samples else None
    return make_inputs(method, program.seed, sizes, ranges)


def sample_ranges(method: MethodPlan, samples: list[tuple[Any, ...]]) -> list[Range | None]:
    """Per leaf of the method's inputs, the range of its values over ``samples``: for a float
    tensor, the element-wise min and max over the samples and the dynamic dims (so that each
    feature keeps its own range); for an integer tensor the overall min and max; None for bools
    and scalars."""
    import torch
    from torch.utils._pytree import tree_leaves

    leaves = method.leaves()
    per_leaf: list[list[Any]] = [[] for _ in leaves]
    for sample in samples:
        for index, value in enumerate(tree_leaves(tuple(sample))):
            if index < len(leaves):
                per_leaf[index].append(value)
    ranges: list[Range | None] = []
    for spec, values in zip(leaves, per_leaf):
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        if spec.kind != "tensor" or spec.dtype == "bool" or not tensors:
            ranges.append(None)
            continue
        axes = tuple(axis for axis, d in enumerate(spec.shape) if isinstance(d, str))
        if not torch.empty(0, dtype=getattr(torch, TORCH_DTYPES[spec.dtype])).is_floating_point():
            ranges.append((int(min(int(t.min()) for t in tensors)), int(max(int(t.max()) for t in tensors))))
            continue
        lows = [t.double().amin(dim=axes, keepdim=True) if axes else t.double() for t in tensors]
        highs = [t.double().amax(dim=axes, keepdim=True) if axes else t.double() for t in tensors]
        ranges.append((torch.stack(lows).amin(dim=0), torch.stack(highs).amax(dim=0)))
    return ranges


def _make_input(spec: InputPlan, sizes: dict[str, int], generator: Any, ranges: Any = None) -> Any:
    """One input: a tensor, a scalar (its declared value), or a tuple, list or dict of inputs,
    each made in order from the one generator (a flat method's tensors are what they always were);
    ``ranges``: an iterator of each leaf's range (:func:`sample_ranges`), or None."""
    import torch

    if spec.kind == "scalar":
        if ranges is not None:
            next(ranges)
        return spec.value
    if spec.kind == "tuple":
        return tuple(_make_input(item, sizes, generator, ranges) for item in spec.items)
    if spec.kind == "list":
        return [_make_input(item, sizes, generator, ranges) for item in spec.items]
    if spec.kind == "dict":
        return {item.name: _make_input(item, sizes, generator, ranges) for item in spec.items}
    shape = tuple(sizes[d] if isinstance(d, str) else d for d in spec.shape)
    dtype = getattr(torch, TORCH_DTYPES[spec.dtype])
    found = next(ranges) if ranges is not None else None
    if found is not None:
        low, high = found
        if dtype.is_floating_point:
            return (low + (high - low) * torch.rand(shape, generator=generator, dtype=torch.float64)).to(dtype)
        return torch.randint(low, high + 1, shape, generator=generator, dtype=dtype)
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
