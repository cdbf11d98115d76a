"""The Vulkan build check (``vulkan-structural``): each delegate's graph read back, matched to its call.

ExecuTorch's pip runtime registers no ``VulkanBackend`` and this machine has no Vulkan driver:
a Vulkan program cannot run here. What decides whether it loads and binds its arguments is
checked instead (:func:`ptebuild.lowering.structure.check_structure` does what every structural
check shares: the program parses, every constant key its payloads name is in the ``.pte`` or the
``.ptd`` with the bytes it promises, every method is there with the manifest's inputs and eager
PyTorch's outputs and has a Vulkan delegate); here, each delegate call passes the tensors its
graph's inputs and outputs declare (:mod:`ptebuild.runtime.payload_readers.vulkan`): one argument per
graph input and output, dtypes of one kind (the host side's dtype), equal sizes. Nothing is run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ptebuild.errors import REPORT, CheckError, FormatError
from ptebuild.lowering.structure import Call, Matched, check_structure, compatible, tensor_arg


def check_program(model: Any, program: Any, pte: Path, ptd: Path | None) -> list[Any]:
    """The structural check (module docstring); CheckError at the first mismatch."""
    from ptebuild.runtime.payload_readers.vulkan import VulkanReader

    return check_structure(model, program, pte, ptd, VulkanReader(), _match, _summary)


def _match(found: Call) -> Matched:
    from ptebuild.runtime.payload_readers.vulkan import read_graph

    where, values, args = found.where, found.values, found.call.args
    try:
        graph = read_graph(found.reader.delegate_payload(found.delegate, where))
    except FormatError as exc:
        raise CheckError(f"the Vulkan payload does not parse: {exc}; {REPORT}") from None
    if len(args) != len(graph.input_ids) + len(graph.output_ids):
        raise CheckError(
            f"{where}: the call passes {len(args)} arguments, the Vulkan graph has "
            f"{len(graph.input_ids)} inputs and {len(graph.output_ids)} outputs; {REPORT}"
        )
    roles = [("input", v) for v in graph.inputs] + [("output", v) for v in graph.outputs]
    for position, ((role, value), index) in enumerate(zip(roles, args)):
        at = f"{where} {role} {position if role == 'input' else position - len(graph.input_ids)}"
        arg = tensor_arg(values, index)
        if (arg is None) != (value.kind != "VkTensor"):
            raise CheckError(f"{at}: the graph has a {value.kind}, the .pte passes {'a tensor' if arg else values[index].kind}; {REPORT}")
        if arg is None:
            continue
        host = value.host_dtype or "?"
        if not compatible(arg.dtype, host) or value.dims != arg.sizes:
            raise CheckError(f"{at}: the graph has {value.describe()}, the .pte passes {arg.describe()}; {REPORT}")
    return Matched(tuple(v.describe() for v in graph.inputs), tuple(v.describe() for v in graph.outputs),
                   operators=len(graph.operators))


def _summary(matched: Sequence[Matched]) -> str:
    return f"Vulkan graph{'s' if len(matched) > 1 else ''}, {sum(m.operators for m in matched)} operator calls"
