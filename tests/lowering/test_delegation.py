"""The delegation counted from a lowered program is ExecuTorch's own ``get_delegation_info``, node
for node: a CNN on XNNPACK in float and static int8, a model with operators XNNPACK does not take,
and a portable program of two methods (nothing delegated).

Slow (four lowerings of their own): the default run has the same comparison on a real build of the
figures project (tests/test_insight.py)."""

from __future__ import annotations

import pytest
import torch

from ptebuild.lowering.delegation import method_delegation, program_delegation

pytestmark = pytest.mark.slow


class Cnn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.norm = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.max_pool2d(torch.relu(self.norm(self.conv(x))), 2)
        return self.head(y.mean((2, 3)))


class Unsupported(Cnn):
    """The CNN, then cumsum and sort: XNNPACK takes neither."""

    def forward(self, x: torch.Tensor):  # type: ignore[override]
        z = super().forward(x)
        return torch.cumsum(z, 1), z.sort(dim=1).values


class TwoMethods(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))

    def doubled(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * 2 + 1


def _exported(module: torch.nn.Module, x: torch.Tensor, dynamic: bool = True):
    shapes = ({0: torch.export.Dim("batch", min=1, max=8)},) if dynamic else None
    return torch.export.export(module, (x,), dynamic_shapes=shapes, strict=False)


def _int8(module: torch.nn.Module, x: torch.Tensor):
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    prepared = prepare_pt2e(_exported(module, x).module(), XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True)))
    prepared(x)
    return _exported(convert_pt2e(prepared), x)


def _lowered(programs: dict, xnnpack: bool):
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    partitioner = []
    if xnnpack:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        partitioner = [XnnpackPartitioner()]
    return to_edge_transform_and_lower(programs, partitioner=partitioner, compile_config=EdgeCompileConfig(_check_ir_validity=False))


@pytest.fixture(scope="module")
def lowered():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 16, 16)
    cnn = Cnn().eval()
    two = TwoMethods().eval()

    class Doubled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = two

        def forward(self, x):
            return self.model.doubled(x)

    return {
        "cnn": _lowered({"forward": _exported(cnn, x)}, xnnpack=True),
        "cnn-int8": _lowered({"forward": _int8(cnn, x)}, xnnpack=True),
        "unsupported": _lowered({"forward": _exported(Unsupported().eval(), x)}, xnnpack=True),
        "portable": _lowered({"forward": _exported(two, torch.randn(2, 4)), "doubled": _exported(Doubled(), torch.randn(2, 4))},
                             xnnpack=False),
    }


@pytest.mark.parametrize("name", ["cnn", "cnn-int8", "unsupported", "portable"])
def test_the_counts_are_get_delegation_infos(lowered, name):
    from executorch.devtools.backend_debug import get_delegation_info

    edge = lowered[name]
    for method in edge.methods:
        ours = method_delegation(method, edge.exported_program(method).graph_module)
        theirs = get_delegation_info(edge.exported_program(method).graph_module)
        assert ours.delegated_nodes == theirs.num_delegated_nodes
        assert ours.non_delegated_nodes == theirs.num_non_delegated_nodes
        assert ours.subgraphs == theirs.num_delegated_subgraphs
        assert ours.by_operator() == {op: (b.delegated, b.non_delegated) for op, b in theirs.delegation_by_operator.items()}


def test_what_each_program_delegates(lowered):
    cnn = program_delegation(lowered["cnn"], ["forward"])
    (share,) = cnn.methods[0].delegates
    assert share.backend == "XnnpackBackend" and dict(share.operators)["aten_convolution_default"] == 1
    assert dict(cnn.methods[0].non_delegated) == {"aten_mean_dim": 1, "getitem": 2}  # XNNPACK takes no mean over (2, 3)
    int8 = program_delegation(lowered["cnn-int8"], ["forward"])
    quantized = dict(int8.methods[0].delegates[0].operators)
    assert any(op.startswith("quantized_decomposed_") for op in quantized)
    unsupported = program_delegation(lowered["unsupported"], ["forward"])
    assert {"aten_cumsum_default", "aten_sort_default"} <= set(dict(unsupported.non_delegated()))
    assert unsupported.fraction is not None and cnn.fraction is not None and unsupported.fraction < cnn.fraction
    portable = program_delegation(lowered["portable"], ["doubled", "forward"])
    assert [m.method for m in portable.methods] == ["doubled", "forward"]
    assert portable.fraction == 0.0 and portable.backends() == ()
    doubled = dict(portable.method("doubled").non_delegated)
    assert doubled["aten_add_tensor"] == doubled["aten_mul_tensor"] == doubled["aten_addmm_default"] == 1
    assert portable.non_delegated_nodes == sum(doubled.values()) + portable.method("forward").non_delegated_nodes
