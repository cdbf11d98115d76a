"""Count a lowered program's delegation from its graphs (:mod:`ptebuild.insight.delegation`).

Runs in the worker, on the edge program manager that ``to_edge_transform_and_lower`` returned
(before ``to_executorch``), one method at a time: the same graphs and the same rule as ExecuTorch's
``get_delegation_info``, without its pandas table. Needs no import of torch itself: it walks the
graph modules it is given.
"""

from __future__ import annotations

from typing import Any

from ptebuild.insight.delegation import DelegateShare, Delegation, MethodDelegation, counts, operator_of

_CALL_DELEGATE = "executorch_call_delegate"
_LOWERED_PREFIX = "lowered_module_"


def method_delegation(method: str, graph_module: Any) -> MethodDelegation:
    """The delegation of one method's lowered graph module (``edge.exported_program(m).graph_module``)."""
    left: list[str] = []
    taken: dict[str, list[str]] = {}
    subgraphs: dict[str, int] = {}
    for node in graph_module.graph.nodes:
        if node.op == "call_function":
            name = operator_of(node.name)
            if name != _CALL_DELEGATE:
                left.append(name)
        elif node.op == "get_attr" and node.name.startswith(_LOWERED_PREFIX):
            lowered = getattr(graph_module, node.name)
            backend = str(getattr(lowered, "backend_id", "") or "?")
            subgraphs[backend] = subgraphs.get(backend, 0) + 1
            ops = taken.setdefault(backend, [])
            for inner in lowered.original_module.graph.nodes:
                if inner.op == "call_function":
                    ops.append(operator_of(inner.name))
    shares = tuple(DelegateShare(b, subgraphs[b], counts(taken[b])) for b in sorted(taken))
    return MethodDelegation(method, shares, counts(left))


def program_delegation(edge: Any, methods: list[str]) -> Delegation:
    """The delegation of every method of an ``EdgeProgramManager`` (in ``methods``' order)."""
    return Delegation(tuple(method_delegation(m, edge.exported_program(m).graph_module) for m in methods))
