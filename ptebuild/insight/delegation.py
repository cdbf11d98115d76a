"""Delegation: per method, which operator nodes each delegate took and which were left to kernels.

The counts are those of ExecuTorch's ``executorch.devtools.backend_debug.get_delegation_info``
(executorch 1.5.1) on the lowered edge program of each method, so that the two agree:

- a node counts if it is a ``call_function`` node; its operator is the node's name without a
  trailing ``_<digits>`` (``aten_convolution_default_3`` -> ``aten_convolution_default``;
  ``getitem`` for a tuple access);
- the nodes of the top graph are the non-delegated ones, except the ``executorch_call_delegate``
  nodes themselves; the nodes of each lowered module's original graph are delegated, to that
  module's backend (``XnnpackBackend``...), one subgraph per lowered module.

They are counted in the worker, from the program it lowered (:mod:`ptebuild.lowering.delegation`),
right after ``to_edge_transform_and_lower`` returns, as upstream's docs call ``get_delegation_info``
(``to_executorch`` then adds memory-planning ``alloc`` nodes to the same graphs in place, which are
no operators), and kept with the action result: a cached program has them without lowering again.

**Delegated fraction**: delegated nodes over all nodes, not counting ``getitem`` nodes, which
take an item of a tuple and run no kernel (a fully delegated method whose delegate returns a
tuple is 100%, not ``n / (n + 1)``); None for a method without operator nodes.

JSON (:meth:`Delegation.to_json`; the derived counts are written for readers, and ignored when
read back)::

    {"fraction": 0.625,
     "methods": {"forward": {"delegated": {"XnnpackBackend": {"subgraphs": 2,
                                                             "operators": {"aten_linear_default": 1, ...}}},
                             "non_delegated": {"aten_mean_dim": 1, "getitem": 3},
                             "delegated_nodes": 6, "non_delegated_nodes": 6, "fraction": 0.625}}}
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

TUPLE_ACCESS = "getitem"
"""The operator name of a node that takes an item of a tuple (not counted in the fraction)."""
_SUFFIX = re.compile(r"_\d+$")

Counts = tuple[tuple[str, int], ...]
"""Operator name -> number of nodes, sorted by name."""


def operator_of(node_name: str) -> str:
    """The operator a node of that name counts as: its name without a trailing ``_<digits>``."""
    return _SUFFIX.sub("", node_name)


def counts(names: Iterable[str]) -> Counts:
    """How many times each operator occurs among ``names`` (operator names), sorted by name."""
    found: dict[str, int] = {}
    for name in names:
        found[name] = found.get(name, 0) + 1
    return tuple(sorted(found.items()))


def _total(counted: Counts, *, kernels_only: bool = False) -> int:
    return sum(n for op, n in counted if not (kernels_only and op == TUPLE_ACCESS))


@dataclass(frozen=True)
class DelegateShare:
    """What one backend took of a method: how many subgraphs, and its nodes by operator."""

    backend: str
    subgraphs: int
    operators: Counts

    @property
    def nodes(self) -> int:
        return _total(self.operators)

    def to_json(self) -> dict[str, Any]:
        return {"subgraphs": self.subgraphs, "operators": dict(self.operators)}


@dataclass(frozen=True)
class MethodDelegation:
    """One method's delegation: each backend's share, and the nodes left to kernels."""

    method: str
    delegates: tuple[DelegateShare, ...]
    """One per backend, sorted by backend id."""
    non_delegated: Counts

    @property
    def delegated_nodes(self) -> int:
        return sum(share.nodes for share in self.delegates)

    @property
    def non_delegated_nodes(self) -> int:
        return _total(self.non_delegated)

    @property
    def subgraphs(self) -> int:
        return sum(share.subgraphs for share in self.delegates)

    def kernel_nodes(self) -> tuple[int, int]:
        """``(delegated, non-delegated)`` nodes, ``getitem`` not counted."""
        return (sum(_total(s.operators, kernels_only=True) for s in self.delegates),
                _total(self.non_delegated, kernels_only=True))

    @property
    def fraction(self) -> float | None:
        """Delegated nodes over all nodes, ``getitem`` not counted; None without any node."""
        return _fraction(*self.kernel_nodes())

    def by_operator(self) -> dict[str, tuple[int, int]]:
        """Operator -> ``(delegated, non-delegated)`` nodes: ``get_delegation_info``'s table."""
        table: dict[str, tuple[int, int]] = {}
        for share in self.delegates:
            for op, n in share.operators:
                d, nd = table.get(op, (0, 0))
                table[op] = (d + n, nd)
        for op, n in self.non_delegated:
            d, nd = table.get(op, (0, 0))
            table[op] = (d, nd + n)
        return dict(sorted(table.items()))

    def to_json(self) -> dict[str, Any]:
        return {
            "delegated": {share.backend: share.to_json() for share in self.delegates},
            "non_delegated": dict(self.non_delegated),
            "delegated_nodes": self.delegated_nodes,
            "non_delegated_nodes": self.non_delegated_nodes,
            "fraction": _rounded(self.fraction),
        }

    @classmethod
    def from_json(cls, method: str, data: Mapping[str, Any]) -> MethodDelegation:
        """Raises TypeError, KeyError or ValueError if ``data`` is not a method's delegation."""
        shares = tuple(
            DelegateShare(str(backend), int(share["subgraphs"]), _counts(share["operators"]))
            for backend, share in sorted(dict(data["delegated"]).items())
        )
        return cls(method, shares, _counts(data["non_delegated"]))


@dataclass(frozen=True)
class Delegation:
    """A program's delegation, method by method (in the program's method order)."""

    methods: tuple[MethodDelegation, ...]

    def method(self, name: str) -> MethodDelegation | None:
        return next((m for m in self.methods if m.method == name), None)

    @property
    def delegated_nodes(self) -> int:
        return sum(m.delegated_nodes for m in self.methods)

    @property
    def non_delegated_nodes(self) -> int:
        return sum(m.non_delegated_nodes for m in self.methods)

    @property
    def fraction(self) -> float | None:
        """Over all methods, as :attr:`MethodDelegation.fraction`."""
        pairs = [m.kernel_nodes() for m in self.methods]
        return _fraction(sum(d for d, _ in pairs), sum(n for _, n in pairs))

    def backends(self) -> tuple[str, ...]:
        return tuple(sorted({s.backend for m in self.methods for s in m.delegates}))

    def non_delegated(self) -> Counts:
        """The operators left to kernels in all methods together, ``getitem`` left out."""
        total: dict[str, int] = {}
        for m in self.methods:
            for op, n in m.non_delegated:
                if op != TUPLE_ACCESS:
                    total[op] = total.get(op, 0) + n
        return tuple(sorted(total.items()))

    def to_json(self) -> dict[str, Any]:
        return {"fraction": _rounded(self.fraction), "methods": {m.method: m.to_json() for m in self.methods}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Delegation:
        """Raises TypeError, KeyError or ValueError if ``data`` is not a delegation."""
        methods = data["methods"]
        if not isinstance(methods, Mapping):
            raise TypeError("delegation.methods must be an object of method name to delegation")
        return cls(tuple(MethodDelegation.from_json(str(name), m) for name, m in methods.items()))

    def describe(self) -> str:
        """One line: ``62.5% of 8 operator nodes delegated (XnnpackBackend); left to kernels: aten_mean_dim ×1, ...``."""
        pairs = [m.kernel_nodes() for m in self.methods]
        delegated, left = sum(d for d, _ in pairs), sum(n for _, n in pairs)
        if delegated + left == 0:
            return "no operator nodes"
        backends = ", ".join(self.backends()) or "no delegate"
        line = f"{percent(self.fraction)} of {delegated + left} operator nodes delegated ({backends})"
        rest = self.non_delegated()
        if rest:
            shown = ", ".join(f"{op} ×{n}" for op, n in sorted(rest, key=lambda item: (-item[1], item[0]))[:6])
            line += f"; left to kernels: {shown}" + (f" and {len(rest) - 6} more" if len(rest) > 6 else "")
        return line


def _counts(data: Any) -> Counts:
    if not isinstance(data, Mapping):
        raise TypeError("operator counts must be an object of operator name to count")
    return tuple(sorted((str(op), int(n)) for op, n in data.items()))


def _fraction(delegated: int, left: int) -> float | None:
    return delegated / (delegated + left) if delegated + left else None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def percent(value: float | None) -> str:
    """A fraction as the report shows it: ``62.5%``, ``-`` for None."""
    return "-" if value is None else f"{100 * value:.1f}%"
