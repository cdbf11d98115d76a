"""A program's bytes, split: the ``.pte``'s plan, constants, named data and delegate payloads,
and the ``.ptd`` files beside it.

Read from the files alone by :func:`ptebuild.runtime.pte_insight.pte_split` (nothing is
executed). A ``.pte`` is the ``Program`` flatbuffer (with its header) followed by segments, and
its bytes are counted once each:

- **plan**: the flatbuffer (methods, values, instructions, operator names, delegate specs)
  without the constant buffers and inline delegate data kept in it;
- **constants**: the constant tensors, in ``Program.constant_segment`` or inline in
  ``Program.constant_buffer``;
- **named data**: blobs the ``.pte`` holds by key (``Program.named_data``): an XNNPACK or Vulkan
  program's weights when it has no ``.ptd``, a Core ML model shared by its methods;
- **compiled code**: named data a delegate's payload reader says is code, not weights (CUDA's
  AOTInductor library, ``<sha256>_so_blob``: :meth:`ptebuild.runtime.payloads.PayloadReader.is_code`);
- **delegates**: each backend's payloads (by delegate id), in segments or inline; a segment
  that several delegates use counts once;
- **mutable data**: the initial state of mutable buffers (``Program.mutable_data_segments``);
- **unclaimed**: segments nothing above refers to; **padding**: alignment, the rest.

The parts add up to the file's size. A ``.ptd`` is counted whole, with the other programs that
load it (a weights file programs share: "unique" bytes count it once, :func:`unique_bytes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WeightsFile:
    """A ``.ptd`` a program loads: its name, size, and the other programs that load it too."""

    name: str
    size: int
    shared_with: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.size, "shared_with": list(self.shared_with)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WeightsFile:
        return cls(str(data["name"]), int(data["bytes"]), tuple(str(p) for p in data.get("shared_with") or ()))


@dataclass(frozen=True)
class SizeSplit:
    """A program's bytes by part (see the module docstring); ``pte`` is the file's size."""

    pte: int
    plan: int
    constants: int = 0
    named_data: int = 0
    delegates: tuple[tuple[str, int], ...] = ()
    """Delegate id -> payload bytes, sorted by id."""
    mutable_data: int = 0
    unclaimed: int = 0
    padding: int = 0
    ptd: tuple[WeightsFile, ...] = ()
    code: int = 0
    """Compiled code kept as named data (a CUDA program's library), not counted in ``named_data``."""

    @property
    def delegate_bytes(self) -> int:
        return sum(n for _, n in self.delegates)

    @property
    def ptd_bytes(self) -> int:
        return sum(f.size for f in self.ptd)

    @property
    def largest_ptd(self) -> WeightsFile | None:
        return max(self.ptd, key=lambda f: (f.size, f.name), default=None)

    def with_weights(self, files: Iterable[WeightsFile]) -> SizeSplit:
        from dataclasses import replace

        return replace(self, ptd=tuple(sorted(files, key=lambda f: f.name)))

    def pte_parts(self) -> list[tuple[str, int]]:
        """``(label, bytes)`` of every non-empty part of the ``.pte``, in file order."""
        out = [("plan", self.plan), ("constants", self.constants), ("named data", self.named_data), ("compiled code", self.code)]
        out += [(f"delegate {backend}", n) for backend, n in self.delegates]
        out += [("mutable data", self.mutable_data), ("unclaimed", self.unclaimed), ("padding", self.padding)]
        return [(label, n) for label, n in out if n]

    def parts(self) -> list[tuple[str, int]]:
        """:meth:`pte_parts`, then each ``.ptd`` (by its file name)."""
        return self.pte_parts() + [(f.name, f.size) for f in self.ptd]

    def to_json(self) -> dict[str, Any]:
        return {
            "pte": self.pte,
            "plan": self.plan,
            "constants": self.constants,
            "named_data": self.named_data,
            "delegates": dict(self.delegates),
            "mutable_data": self.mutable_data,
            "unclaimed": self.unclaimed,
            "padding": self.padding,
            "ptd": [f.to_json() for f in self.ptd],
            **({"code": self.code} if self.code else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SizeSplit:
        """Raises TypeError, KeyError or ValueError if ``data`` is not a size split."""
        return cls(
            pte=int(data["pte"]),
            plan=int(data["plan"]),
            constants=int(data.get("constants") or 0),
            named_data=int(data.get("named_data") or 0),
            delegates=tuple(sorted((str(k), int(v)) for k, v in dict(data.get("delegates") or {}).items())),
            mutable_data=int(data.get("mutable_data") or 0),
            unclaimed=int(data.get("unclaimed") or 0),
            padding=int(data.get("padding") or 0),
            ptd=tuple(WeightsFile.from_json(f) for f in data.get("ptd") or ()),
            code=int(data.get("code") or 0),
        )


def unique_bytes(splits: Iterable[SizeSplit]) -> int:
    """The bytes of several programs' files together, a ``.ptd`` that programs share counted once."""
    total = 0
    seen: set[str] = set()
    for split in splits:
        total += split.pte
        for f in split.ptd:
            if f.name not in seen:
                seen.add(f.name)
                total += f.size
    return total
