"""Example inputs (:mod:`ptebuild.lowering.examples`): every dtype, deterministic, at the sizes the check uses."""

from __future__ import annotations

import pytest

from ptebuild.lowering.examples import check_sizes, make_inputs
from ptebuild.plan import DimPlan, InputPlan, MethodPlan

DTYPES = ["float32", "float16", "bfloat16", "int32", "int64", "int8", "uint8", "bool"]


def method(dtype: str, **bounds) -> MethodPlan:
    return MethodPlan(
        name="forward",
        function="forward",
        inputs=(InputPlan(name="x", shape=("batch", 5), dtype=dtype, **bounds),),
        dims=(DimPlan(name="batch", min=1, max=6, example=3),),
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype(dtype):
    import torch

    (x,) = make_inputs(method(dtype), seed=7)
    assert x.dtype == getattr(torch, dtype)
    assert tuple(x.shape) == (3, 5)
    (again,) = make_inputs(method(dtype), seed=7)
    assert torch.equal(x, again)


def test_integer_range_and_seed():
    import torch

    (x,) = make_inputs(method("int64", low=3, high=5), seed=1)
    assert set(x.flatten().tolist()) <= {3, 4}
    (other,) = make_inputs(method("float32"), seed=2)
    (first,) = make_inputs(method("float32"), seed=1)
    assert not torch.equal(first, other)


def test_sizes_override_the_example():
    (x,) = make_inputs(method("float32"), seed=1, sizes={"batch": 6})
    assert tuple(x.shape) == (6, 5)


def test_check_sizes_cover_example_and_extremes():
    assert check_sizes(method("float32")) == [{"batch": 3}, {"batch": 1}, {"batch": 6}]
    static = MethodPlan(name="f", function="f", inputs=(InputPlan("x", (2,), "float32"),), dims=())
    assert check_sizes(static) == [{}]
