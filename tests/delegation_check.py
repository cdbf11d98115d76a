"""The check the figures tests make of a build's delegation: the program lowered again in the
test's process as the worker lowers it, and ExecuTorch's own ``get_delegation_info`` run on each
method of the edge program manager that ``to_edge_transform_and_lower`` returns, as it returns it
(as upstream's docs call it: ``to_executorch`` then adds memory-planning ``alloc`` nodes to that
same graph in place, which are no operators), compared node for node with what the build recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ptebuild.insight.delegation import Delegation


def lowered_again(manifest: Path, name: str, monkeypatch: Any, folder: Path) -> tuple[dict[str, Any], Any]:
    """``(method -> get_delegation_info of its lowered graph, LoweredProgram)`` of program
    ``name``, lowered in this process."""
    import executorch.exir
    from executorch.devtools.backend_debug import get_delegation_info

    from ptebuild.lowering.examples import make_inputs
    from ptebuild.manifest import load_manifest
    from ptebuild.models.factory.loading import build_model
    from ptebuild.models.factory.lower import lower

    kept = []
    patched = executorch.exir.to_edge_transform_and_lower
    original = getattr(patched, "__wrapped__", patched)  # not a wrapper of an earlier call's wrapper

    def keeping(*args: Any, **kwargs: Any) -> Any:
        edge = original(*args, **kwargs)
        kept.append({m: get_delegation_info(edge.exported_program(m).graph_module) for m in edge.methods})
        return edge

    keeping.__wrapped__ = original  # type: ignore[attr-defined]
    monkeypatch.setattr(executorch.exir, "to_edge_transform_and_lower", keeping)
    monkeypatch.syspath_prepend(str(manifest.parent))
    plan = load_manifest(manifest)
    program = next(p for p in plan.programs if p.name == name)
    model = build_model(program, manifest.parent, str(manifest))
    inputs = {m.name: make_inputs(m, program.seed) for m in program.methods}
    lowered = lower(model, program, inputs, folder / name, lambda _text: None)
    (infos,) = kept
    return infos, lowered


def compare(recorded: Delegation, infos: dict[str, Any]) -> list[tuple[str, tuple[int, int, int], tuple[int, int, int]]]:
    """Assert that ``recorded`` is ``infos`` (``get_delegation_info`` per method) node for node;
    return ``(method, ours, theirs)`` with ``(delegated nodes, non-delegated nodes, subgraphs)``."""
    assert {m.method for m in recorded.methods} == set(infos)
    rows = []
    for method in recorded.methods:
        theirs = infos[method.method]
        ours = (method.delegated_nodes, method.non_delegated_nodes, method.subgraphs)
        counted = (theirs.num_delegated_nodes, theirs.num_non_delegated_nodes, theirs.num_delegated_subgraphs)
        assert ours == counted, (method.method, ours, counted)
        assert method.by_operator() == {op: (b.delegated, b.non_delegated) for op, b in theirs.delegation_by_operator.items()}
        rows.append((method.method, ours, counted))
    return rows
