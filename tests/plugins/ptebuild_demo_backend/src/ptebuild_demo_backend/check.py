"""The demo build check (``demo-structural``): each call's payload read back and matched to its arguments.

:func:`ptebuild.lowering.structure.check_structure` does what every structural check shares (the
program parses, its weights' keys are in the ``.pte`` or the ``.ptd`` with the bytes they
promise, every method has the manifest's inputs and eager PyTorch's outputs, and a demo
delegate); here each call passes one tensor per input and output of its payload, of its dtype
and shape.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ptebuild.errors import CheckError, FormatError
from ptebuild.lowering.structure import Call, Matched, check_structure, tensor_arg
from ptebuild_demo_backend.payload import DemoReader, describe, read_graph


def check_program(model: Any, program: Any, pte: Path, ptd: Path | None) -> list[Any]:
    return check_structure(model, program, pte, ptd, DemoReader(), _match)


def _match(found: Call) -> Matched:
    try:
        graph = read_graph(found.payload())
    except FormatError as exc:
        raise CheckError(f"the demo payload does not parse: {exc}") from None
    specs = [("input", s) for s in graph.inputs] + [("output", s) for s in graph.outputs]
    if len(found.call.args) != len(specs):
        raise CheckError(f"{found.where}: the call passes {len(found.call.args)} arguments, the payload has "
                         f"{len(graph.inputs)} inputs and {len(graph.outputs)} outputs")
    for (role, (dtype, shape)), index in zip(specs, found.call.args):
        arg = tensor_arg(found.values, index)
        if arg is None or arg.dtype != dtype or arg.sizes != shape:
            passed = arg.describe() if arg is not None else "no tensor"
            raise CheckError(f"{found.where} {role}: the payload has {describe((dtype, shape))}, the .pte passes {passed}")
    return Matched(tuple(map(describe, graph.inputs)), tuple(map(describe, graph.outputs)),
                   f"demo graph, {len(graph.operators)} operators", len(graph.operators))
