"""What ``ptebuild inspect`` reports about a ``.pte`` or ``.ptd``: typed values and their JSON.

:mod:`.pte_inspection` and :mod:`.ptd_inspection` read a file into these values,
:mod:`.inspection_text` writes them as text, ``to_json`` gives the document of
``ptebuild inspect --json`` (field names as here, paths as strings, tuples as lists), and
:mod:`.diff` compares two of them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ptebuild.insight.file_insight import FileInsight


@dataclass(frozen=True)
class ValueSpec:
    """A method input or output: its EValue index and type; for a tensor its dtype, sizes, dynamism."""

    index: int
    type: str
    dtype: str | None = None
    sizes: tuple[int, ...] | None = None
    dynamism: str | None = None

    def describe(self) -> str:
        if self.type != "Tensor":
            return self.type
        return f"{self.dtype}[{', '.join(map(str, self.sizes or ()))}]" + (
            f" ({self.dynamism})" if self.dynamism and self.dynamism != "static" else ""
        )


@dataclass(frozen=True)
class DelegateInfo:
    """One delegate of a method and its payload (``location`` inline or segment ``data_index``)."""

    index: int
    backend: str
    location: str
    data_index: int
    offset: int | None
    """File offset of the payload (None: inline data of unknown position)."""
    size: int
    sha256: str
    compile_specs: tuple[str, ...] = ()
    keys: tuple[str, ...] | None = None
    """Named-data keys the payload needs (None: this reader cannot list them)."""
    contents: dict[str, Any] | None = None
    """What the payload holds, for payloads this reader understands (:mod:`.payloads`: its
    backend's payload reader describes it, e.g. layers by type, inputs, outputs), else None."""
    summary: str | None = None
    """``contents`` in one line, for the text of ``ptebuild inspect``."""


@dataclass(frozen=True)
class BufferSpec:
    """A mutable buffer of a method (a KV cache): kept in planned memory between calls."""

    index: int
    dtype: str
    sizes: tuple[int, ...]
    name: str | None = None
    """Its fully qualified name, when the program records it (else None)."""

    def describe(self) -> str:
        return f"{self.name or f'value {self.index} (unnamed)'}  {self.dtype}[{', '.join(map(str, self.sizes))}]"


@dataclass(frozen=True)
class MethodInfo:
    name: str
    inputs: tuple[ValueSpec, ...]
    outputs: tuple[ValueSpec, ...]
    operators: tuple[str, ...]
    delegates: tuple[DelegateInfo, ...]
    values: int
    instructions: int
    plan_sha256: str
    """Digest of the plan (values, chains, operators, delegate ids and specs); payloads excluded."""
    plan_parts: dict[str, str] = field(default_factory=dict, compare=False)
    """Digest of each part of the plan (values, chains, operators, inputs, outputs, delegates)."""
    delegate_calls: int = 0
    """Instructions that call a delegate: how much of the method the delegates took, with..."""
    kernel_calls: int = 0
    """...the instructions that call an operator of the runtime's own kernels (outside any delegate)."""
    mutable_buffers: tuple[BufferSpec, ...] = ()
    """Tensors the method keeps between calls (:mod:`.llm_facts`)."""
    returns_constant: bool = False
    """True for a method that only returns a constant (an LLM's metadata methods), then ``constant``."""
    constant: Any = None


@dataclass(frozen=True)
class SegmentInfo:
    index: int
    offset: int
    size: int
    sha256: str
    used_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class DataKey:
    key: str
    size: int
    segment: int
    sha256: str


@dataclass(frozen=True)
class PteInspection:
    path: Path
    size: int
    header: dict[str, Any]
    version: int
    methods: tuple[MethodInfo, ...]
    segments: tuple[SegmentInfo, ...]
    named_data: tuple[DataKey, ...]
    constant_buffers: tuple[str, ...]
    """SHA-256 of each constant buffer kept in the flatbuffer."""
    needs: tuple[str, ...]
    """Keys the program needs from a ``.ptd``."""
    notes: tuple[str, ...] = ()
    kind: str = "pte"
    kernels: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The operators a selective runtime build must register, with the kernel keys of their calls
    (:mod:`.oplist`, as ExecuTorch's ``gen_oplist`` lists them); delegated calls are not among them."""
    insight: FileInsight | None = None
    """What is inside it (:mod:`.pte_insight`): calls, size split, planned memory, and what a build
    record beside it recorded."""

    def method(self, name: str) -> MethodInfo | None:
        return next((m for m in self.methods if m.name == name), None)

    def to_json(self) -> dict[str, Any]:
        from dataclasses import replace

        document = _jsonable(replace(self, insight=None))
        document["insight"] = self.insight.to_json() if self.insight is not None else None
        return document


@dataclass(frozen=True)
class PtdInspection:
    path: Path
    size: int
    header: dict[str, Any]
    version: int
    segments: tuple[SegmentInfo, ...]
    keys: tuple[DataKey, ...]
    kind: str = "ptd"

    def to_json(self) -> dict[str, Any]:
        return _jsonable(self)


def _jsonable(value: Any) -> dict[str, Any]:
    def convert(item: Any) -> Any:
        if isinstance(item, Path):
            return str(item)
        if isinstance(item, dict):
            return {k: convert(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [convert(v) for v in item]
        return item

    converted: dict[str, Any] = convert(asdict(value))  # a dict converts to a dict
    return converted
