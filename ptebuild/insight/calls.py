"""What a ``.pte`` alone shows of its delegation: each method's delegate calls, by backend, and
its operator calls, by operator (the instructions of its chains).

A call is one instruction: a ``DelegateCall`` runs a whole delegated subgraph, a ``KernelCall``
one operator's kernel (``aten::mean.out``). These are not the node counts of
:mod:`.delegation` (those need the lowered graph, which the file does not keep: the build record
has them), but they are what a runtime will execute. Read by :func:`ptebuild.runtime.pte_insight.program_calls`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ptebuild.insight.delegation import Counts


@dataclass(frozen=True)
class MethodCalls:
    """One method's instructions that call something: delegates by backend id, operators by name."""

    method: str
    delegate_calls: Counts
    operator_calls: Counts

    @property
    def delegated(self) -> int:
        return sum(n for _, n in self.delegate_calls)

    @property
    def operators(self) -> int:
        return sum(n for _, n in self.operator_calls)

    def to_json(self) -> dict[str, Any]:
        return {"delegate_calls": dict(self.delegate_calls), "operator_calls": dict(self.operator_calls)}

    @classmethod
    def from_json(cls, method: str, data: Mapping[str, Any]) -> MethodCalls:
        return cls(method, tuple(sorted((str(k), int(v)) for k, v in dict(data["delegate_calls"]).items())),
                   tuple(sorted((str(k), int(v)) for k, v in dict(data["operator_calls"]).items())))

    def describe(self) -> str:
        """``2 delegate calls (XnnpackBackend ×2), 3 operator calls (aten::mean.out ×1, ...)``."""
        delegates = ", ".join(f"{b} ×{n}" for b, n in self.delegate_calls)
        operators = ", ".join(f"{op} ×{n}" for op, n in sorted(self.operator_calls, key=lambda i: (-i[1], i[0])))
        line = f"{self.delegated} delegate calls" + (f" ({delegates})" if delegates else "")
        return line + f", {self.operators} operator calls" + (f" ({operators})" if operators else "")
