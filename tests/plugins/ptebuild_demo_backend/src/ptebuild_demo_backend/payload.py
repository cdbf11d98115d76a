"""Reads the demo delegate's payload in pure Python (what ``ptebuild inspect`` and ``verify`` need).

Layout: the magic ``PTDEMO01``, then UTF-8 JSON (keys sorted)::

    {"format": "ptebuild-demo", "version": 1,
     "operators": ["aten.addmm.default", ...],          the partition's operators, in order
     "inputs": [{"dtype": "float32", "shape": [2, 4]}],  what each call passes in...
     "outputs": [{"dtype": "float32", "shape": [2, 4]}], ...and gets back, in order
     "constants": [{"name": "weight", "key": "<sha256 hex>", "bytes": 64}]}

Every constant is named data under the SHA-256 hex of its bytes (in the ``.pte``, or the
``.ptd`` with a data name): the keys the program needs.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ptebuild.errors import FormatError
from ptebuild.runtime.payloads import DelegatePayload, PayloadInfo, PayloadReader

DELEGATE_ID = "PtebuildDemoBackend"
MAGIC = b"PTDEMO01"
FORMAT = "ptebuild-demo"


@dataclass(frozen=True)
class DemoGraph:
    operators: tuple[str, ...]
    inputs: tuple[tuple[str, tuple[int, ...]], ...]
    outputs: tuple[tuple[str, tuple[int, ...]], ...]
    constants: tuple[tuple[str, str, int], ...]
    """``(name, key, bytes)`` of each weight."""

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(key for _, key, _ in self.constants)

    def summary(self) -> str:
        counts = Counter(self.operators)
        ops = ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda i: (-i[1], i[0])))
        return (f"demo graph: {len(self.operators)} operators ({ops}); inputs {', '.join(map(describe, self.inputs))}; "
                f"outputs {', '.join(map(describe, self.outputs))}; {len(self.constants)} constants in named data")

    def to_json(self) -> dict[str, Any]:
        return {"operators": dict(sorted(Counter(self.operators).items())),
                "inputs": [describe(i) for i in self.inputs], "outputs": [describe(o) for o in self.outputs],
                "constants": {name: key for name, key, _ in self.constants}}


def describe(spec: tuple[str, tuple[int, ...]]) -> str:
    return f"{spec[0]}[{', '.join(map(str, spec[1]))}]"


def encode(document: dict[str, Any]) -> bytes:
    return MAGIC + json.dumps({"format": FORMAT, "version": 1, **document}, sort_keys=True).encode()


def read_graph(payload: DelegatePayload) -> DemoGraph:
    """The payload's graph; FormatError (naming the payload) if it is not one."""
    data = payload.whole()
    if not data.startswith(MAGIC):
        raise FormatError(f"{payload.where}: not a demo payload: starts with {data[:8]!r}, expected {MAGIC!r}")
    try:
        doc = json.loads(data[len(MAGIC):].decode("utf-8"))
        if doc.get("format") != FORMAT:
            raise ValueError(f"format {doc.get('format')!r}")
        return DemoGraph(
            tuple(str(op) for op in doc["operators"]),
            tuple((str(t["dtype"]), tuple(int(d) for d in t["shape"])) for t in doc["inputs"]),
            tuple((str(t["dtype"]), tuple(int(d) for d in t["shape"])) for t in doc["outputs"]),
            tuple((str(c["name"]), str(c["key"]), int(c["bytes"])) for c in doc["constants"]),
        )
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise FormatError(f"{payload.where}: corrupt demo payload: {type(exc).__name__}: {exc}") from None


class DemoReader(PayloadReader):
    delegate_id = DELEGATE_ID
    name = "demo"
    describes_contents = True

    def keys(self, payload: DelegatePayload) -> frozenset[str]:
        return read_graph(payload).keys

    def describe(self, payload: DelegatePayload) -> PayloadInfo:
        graph = read_graph(payload)
        return PayloadInfo(tuple(sorted(graph.keys)), graph.to_json(), graph.summary())

    def operators(self, payload: DelegatePayload) -> dict[str, int]:
        return dict(Counter(read_graph(payload).operators))

    def weights_bytes(self, payload: DelegatePayload) -> int:
        return 0  # every weight is named data
