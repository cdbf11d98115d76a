"""A method's mutable buffers and its inputs' and outputs' bytes at each size, found in its lowered
edge program, against what eager PyTorch returns at those sizes."""

from __future__ import annotations

import pytest
import torch

from ptebuild.insight.memory import EXAMPLE
from ptebuild.lowering.memory import method_memory
from ptebuild.plan import DimPlan, InputPlan, MethodPlan


class Cached(torch.nn.Module):
    """A buffer updated in place (a cache), and outputs whose sizes follow the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(4, 16))
        self.register_buffer("steps", torch.zeros(1, dtype=torch.int64))
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor, pos: torch.Tensor):
        self.cache.add_(1.0)
        self.steps.add_(1)
        y = self.linear(x)
        return torch.cat([y, y], 0), (self.cache.sum() * y[:, :1]).to(torch.float16)


METHOD = MethodPlan("forward", "forward", (InputPlan("x", ("batch", 16), "float32"), InputPlan("pos", (1,), "int64")),
                    (DimPlan("batch", 1, 8, 2),))


def _lowered(xnnpack: bool):
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    partitioner = []
    if xnnpack:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        partitioner = [XnnpackPartitioner()]
    with torch.no_grad():
        exported = torch.export.export(Cached().eval(), (torch.randn(2, 16), torch.zeros(1, dtype=torch.int64)),
                                       dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=8)}, None), strict=False)
    edge = to_edge_transform_and_lower({"forward": exported}, partitioner=partitioner,
                                       compile_config=EdgeCompileConfig(_check_ir_validity=False))
    return edge.exported_program("forward")


@pytest.mark.parametrize("xnnpack", [False, True], ids=["portable", "xnnpack"])
def test_mutable_buffers_and_bytes_at_each_size(xnnpack):
    memory = method_memory(_lowered(xnnpack), METHOD)
    assert [(t.name, t.dtype, t.shape, t.size) for t in memory.mutable] == [("cache", "float32", (4, 16), 256), ("steps", "int64", (1,), 8)]
    model = Cached().eval()
    for point in memory.io:
        batch = dict(point.sizes)["batch"]
        outputs = model(torch.randn(batch, 16), torch.zeros(1, dtype=torch.int64))
        assert point.inputs == batch * 16 * 4 + 8
        assert point.outputs == sum(t.numel() * t.element_size() for t in outputs)
    assert [p.at for p in memory.io] == [EXAMPLE, "batch max"]


def test_an_output_of_data_dependent_size_has_no_figure():
    from executorch.exir import EdgeCompileConfig, to_edge

    class NonZero(torch.nn.Module):
        def forward(self, x):
            return torch.nonzero(x)

    method = MethodPlan("forward", "forward", (InputPlan("x", (8,), "float32"),), ())
    exported = torch.export.export(NonZero(), (torch.randn(8),), strict=False)
    edge = to_edge({"forward": exported}, compile_config=EdgeCompileConfig(_check_ir_validity=False))
    (point,) = method_memory(edge.exported_program("forward"), method).io
    assert (point.inputs, point.outputs) == (32, None)
