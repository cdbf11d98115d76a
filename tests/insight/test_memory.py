"""A method's memory as a value, and the sizes its inputs and outputs are measured at."""

from __future__ import annotations

from ptebuild.insight.memory import ALL_MAX, EXAMPLE, IoPoint, MethodMemory, TensorBytes, input_bytes, io_points, tensor_bytes
from ptebuild.plan import DimPlan, InputPlan, MethodPlan


def _method() -> MethodPlan:
    inputs = (
        InputPlan("image", ("batch", 3, "side", "side"), "float32"),
        InputPlan("pair", (), "", kind="tuple", items=(InputPlan("ids", ("batch",), "int64"), InputPlan("t", (), "", kind="scalar", value=0.5))),
        InputPlan("mask", (4,), "bool"),
    )
    return MethodPlan("forward", "forward", inputs, (DimPlan("batch", 1, 8, 2), DimPlan("side", 8, 32, 16)))


def test_the_points_are_the_example_each_dims_max_and_all_at_max():
    points = io_points(_method())
    assert points == (
        (EXAMPLE, (("batch", 2), ("side", 16))),
        ("batch max", (("batch", 8), ("side", 16))),
        ("side max", (("batch", 2), ("side", 32))),
        (ALL_MAX, (("batch", 8), ("side", 32))),
    )
    static = MethodPlan("f", "f", (InputPlan("x", (2, 3), "float16"),), ())
    assert io_points(static) == ((EXAMPLE, ()),)
    assert input_bytes(static, {}) == 12


def test_input_bytes_count_tensors_only():
    method = _method()
    assert input_bytes(method, {"batch": 2, "side": 16}) == 2 * 3 * 16 * 16 * 4 + 2 * 8 + 4
    assert input_bytes(method, {"batch": 8, "side": 32}) == 8 * 3 * 32 * 32 * 4 + 8 * 8 + 4
    assert tensor_bytes("bfloat16", (3, 5)) == 30 and tensor_bytes("complex32", (2,)) is None


def test_json_round_trip():
    memory = MethodMemory("forward", (100, 28), (TensorBytes("k_cache", "float32", (1, 4, 8), 128),),
                          (IoPoint(EXAMPLE, (("batch", 2),), 64, 8), IoPoint("batch max", (("batch", 8),), 256, None)))
    assert memory.planned_bytes == 128 and memory.mutable_bytes == 128
    assert MethodMemory.from_json("forward", memory.to_json()) == memory
    assert memory.point("batch max").outputs is None
