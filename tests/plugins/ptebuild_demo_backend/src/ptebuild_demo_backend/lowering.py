"""The demo delegate: its partitioner and ``PtebuildDemoBackend.preprocess`` (imports torch and
executorch: only a worker imports this module, from the backend's ``partitioners`` hook).

The partitioner gives the delegate every edge operator (the largest partitions, or each operator
alone with ``fuse = false``) and, through ExecuTorch's ``tag_constant_data``, the weights only
they use; ``preprocess`` writes the partition as the payload :mod:`.payload` reads, each weight
into ExecuTorch's named data store under the SHA-256 of its bytes (to the program's ``.ptd``
when it has a data name, passed as the compile spec ``data_name``).
"""

from __future__ import annotations

import hashlib
from typing import Any, final

import torch
from executorch.exir._serialize._named_data_store import NamedDataStore
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.canonical_partitioners.pattern_op_partitioner import generate_pattern_op_partitions
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.backend.utils import tag_constant_data
from executorch.exir.dialects.edge._ops import EdgeOpOverload
from torch.fx.passes.operator_support import OperatorSupportBase

from ptebuild_demo_backend.payload import DELEGATE_ID, encode

ALIGNMENT = 16


class _EdgeOperators(OperatorSupportBase):
    def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
        return node.op == "call_function" and isinstance(node.target, EdgeOpOverload)


class DemoPartitioner(Partitioner):
    def __init__(self, fuse: bool = True, data_name: str | None = None) -> None:
        super().__init__()
        specs = [CompileSpec("data_name", data_name.encode())] if data_name else []
        self.delegation_spec = DelegationSpec(DELEGATE_ID, specs)
        self.fuse = fuse

    def partition(self, exported_program: Any) -> PartitionResult:
        graph = exported_program.graph_module.graph
        if self.fuse:
            groups = [list(p.nodes) for p in generate_pattern_op_partitions(
                exported_program.graph_module, op_support=_EdgeOperators())]
        else:
            groups = [[n] for n in graph.nodes if _EdgeOperators().is_node_supported({}, n)]
        tags = {}
        for i, nodes in enumerate(groups):
            tag = f"demo_{i}"
            for node in nodes:
                node.meta["delegation_tag"] = tag
            tags[tag] = self.delegation_spec
        tag_constant_data(exported_program)
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)


def _spec(value: Any) -> dict[str, Any]:
    return {"dtype": str(value.dtype).removeprefix("torch."), "shape": [int(d) for d in value.shape]}


@final
class PtebuildDemoBackend(BackendDetails):
    @staticmethod
    def preprocess(edge_program: Any, compile_specs: list[CompileSpec]) -> PreprocessResult:
        specs = {spec.key: bytes(spec.value) for spec in compile_specs}
        external = specs["data_name"].decode() if "data_name" in specs else None
        signature = edge_program.graph_signature
        named = {**signature.inputs_to_parameters, **signature.inputs_to_buffers,
                 **signature.inputs_to_lifted_tensor_constants}
        store = NamedDataStore()
        constants, inputs, operators = [], [], []
        for node in edge_program.graph.nodes:
            if node.op == "placeholder" and node.name in named:
                fqn = named[node.name]
                tensor = edge_program.state_dict.get(fqn)
                if tensor is None:
                    tensor = edge_program.constants[fqn]
                data = tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                key = hashlib.sha256(data).hexdigest()
                store.add_named_data(key, data, ALIGNMENT, external_tag=external)
                constants.append({"name": fqn, "key": key, "bytes": len(data)})
            elif node.op == "placeholder":
                inputs.append(_spec(node.meta["val"]))
            elif node.op == "call_function":
                operators.append(getattr(node.target, "__name__", str(node.target)))
            elif node.op == "output":
                outputs = [_spec(arg.meta["val"]) for arg in node.args[0]]
        payload = encode({"operators": operators, "inputs": inputs, "outputs": outputs, "constants": constants})
        return PreprocessResult(processed_bytes=payload, debug_handle_map={},
                                data_store_output=store.get_named_data_store_output())
