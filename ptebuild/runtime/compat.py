"""Which ExecuTorch runtimes load a program: its files' formats, the features they use, and upstream's policy.

Pure Python; imports neither torch nor executorch (the readers are imported when a file is read).

**What decides it.** Nothing in a file names the release that wrote it: the ``.pte``
identifier ``ET12``, its extended header ``eh00`` and ``Program.version`` (0) have been the
same from v0.1.0 to 1.5.1, so every runtime accepts the file at its first checks. Old runtimes
silently ignore flatbuffer fields they do not know (ExecuTorch's schema rules,
``schema/README.md``: tables only, fields appended, never removed), so what decides is whether
the runtime understands the features the program uses. Each is in :data:`FEATURES` with the
first release whose runtime reads it, read from that release's sources (``git show
<tag>:schema/program.fbs``, ``extension/flat_tensor/serialize/flat_tensor.fbs``,
``runtime/executor/program.cpp``, ``exir/_serialize/_program.py``; the first tag holding a
commit by ``git tag --contains``):

====================  ========  ==============================================================
feature               minimum   why
====================  ========  ==============================================================
constant-segment      0.2.0     constants in a segment (``Program.constant_segment``); a 0.1
                                runtime sees no weights
mutable-data          0.4.0     ``Program.mutable_data_segments``
named-data            0.6.0     ``Program.named_data`` (PteDataMap), delegate constants by
                                ``named_key``
external-data         0.7.0     weights in a ``.ptd``: EXTERNAL tensors and named keys served by
                                a data map, in the FlatTensor layout of 0.7 (0.6 wrote another,
                                incompatible layout under the same ``FT01`` identifier)
op:...                1.0.0     ``dim_order_ops::_clone_dim_order`` (its portable kernel)
device-placement      1.3.0     ``ExtraTensorInfo.device_type`` / ``ExecutionPlan.
                                non_const_buffer_device``; older runtimes place it all on CPU
bundled-program       0.2.0     a ``.bpte`` (``BP08``; v0.1.0 wrote ``BP06``)
====================  ========  ==============================================================

Beside them, :data:`SCHEMA_GATES`: since 1.5.0 a runtime refuses a ``Program.version`` or
``FlatTensor.version`` newer than it supports (0), pytorch/executorch#22114
(``Program::kMaxSupportedSchemaVersion``, ``FlatTensorDataMap::kMaxSupportedSchemaVersion``);
older runtimes never read the field. A runtime must also register every operator the program
calls (:mod:`.oplist`) and every backend it delegates to; which backends a runtime was built
with is the device's business, so they are listed, not judged.

**The policy.** ``runtime/COMPATIBILITY.md`` ("Runtime Compatibility Policy", pytorch/executorch
#6307/#6438, applying from v0.4.0): backward compatibility, a ``.pte`` loads on the runtime of
the release that wrote it and of at least the next non-patch release ("and possibly more"); no
forward compatibility (a newer file on an older runtime "possible ... but not guaranteed").
Before 0.4 (alpha) only the runtime of the same revision is supported (pytorch/executorch#2533).
:func:`guaranteed_range` encodes it; a runtime outside that range that meets every feature's
minimum "possibly" loads the program, which is a note, not a refusal.

See also docs.pytorch.org/executorch/stable/pte-file-format.html and ptd-file-format.html, and
pytorch/executorch#14226 (``segment_data_size`` in ``eh00``, 1.0.0: older runtimes ignore it),
#9627 (BC/FC guarantees stated clearly: open).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Version = tuple[int, int, int]

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> Version | None:
    """``"1.5.1"``, ``"1.5.1+cpu"``, ``"1.6.0.dev20260101"``, ``"1.5"`` -> ``(1, 5, 1)``...; None if no version."""
    match = _VERSION.match(text.strip())
    if match is None:
        return None
    return int(match[1]), int(match[2]), int(match[3] or 0)


def version_text(version: Version) -> str:
    return ".".join(map(str, version))


@dataclass(frozen=True)
class Feature:
    """A file-format feature and the first ExecuTorch release whose runtime reads it."""

    name: str
    minimum: Version
    what: str
    """In words, for messages."""
    source: str


FEATURES: Mapping[str, Feature] = {
    f.name: f
    for f in (
        Feature("constant-segment", (0, 2, 0), "constant tensors in a segment (Program.constant_segment)",
                "v0.2.0 schema/program.fbs"),
        Feature("mutable-data", (0, 4, 0), "mutable data segments (Program.mutable_data_segments)",
                "v0.4.0 schema/program.fbs"),
        Feature("named-data", (0, 6, 0), "named data in the program (Program.named_data)",
                "v0.6.0 schema/program.fbs, runtime/executor/pte_data_map.cpp"),
        Feature("external-data", (0, 7, 0), "weights in an external .ptd (FlatTensor layout of 0.7)",
                "v0.7.0 extension/flat_tensor/serialize/flat_tensor.fbs (NamedData.tensor_layout)"),
        Feature("op:dim_order_ops::_clone_dim_order", (1, 0, 0), "operator dim_order_ops::_clone_dim_order",
                "v1.0.0 kernels/portable/cpu/op__clone_dim_order.cpp"),
        Feature("device-placement", (1, 3, 0), "tensors placed on a device (ExtraTensorInfo.device_type)",
                "v1.3.0 schema/program.fbs (DeviceType, non_const_buffer_device)"),
        Feature("bundled-program", (0, 2, 0), "a BundledProgram (.bpte, BP08)",
                "v0.2.0 devtools/bundled_program/schema/bundled_program_schema.fbs"),
    )
}

OPERATOR_FEATURES: Mapping[str, str] = {"dim_order_ops::_clone_dim_order": "op:dim_order_ops::_clone_dim_order"}
"""Operator (name without overload) -> its feature: operators a runtime registers only since a release."""


@dataclass(frozen=True)
class SchemaGate:
    """Runtimes since ``since`` refuse a file of this identifier whose schema version exceeds ``max_version``."""

    identifier: str
    since: Version
    max_version: int
    source: str


SCHEMA_GATES: tuple[SchemaGate, ...] = (
    SchemaGate("ET12", (1, 5, 0), 0, "pytorch/executorch#22114 Program::kMaxSupportedSchemaVersion"),
    SchemaGate("FT01", (1, 5, 0), 0, "pytorch/executorch#22114 FlatTensorDataMap::kMaxSupportedSchemaVersion"),
)

POLICY_START: Version = (0, 4, 0)
"""The first release the compatibility policy applies to (the beta)."""


def guaranteed_range(writer: Version) -> tuple[Version, Version]:
    """``[low, high)``: the runtimes ExecuTorch's policy promises load a file ``writer`` wrote."""
    if writer < POLICY_START:
        return writer, (writer[0], writer[1], writer[2] + 1)
    return writer, (writer[0], writer[1] + 2, 0)


@dataclass(frozen=True)
class FileFormat:
    """One file of a program: its container identifier and schema version."""

    name: str
    identifier: str
    """``ET12`` (.pte), ``FT01`` (.ptd), ``BP08`` (.bpte)."""
    schema_version: int


@dataclass(frozen=True)
class Judgement:
    """What one runtime makes of a program: why it cannot load it (empty: it can), and a note."""

    runtime: Version
    cannot_load: tuple[str, ...] = ()
    note: str = ""

    @property
    def loads(self) -> bool:
        return not self.cannot_load


@dataclass(frozen=True)
class RuntimeSupport:
    """The ExecuTorch runtimes that load one program (its ``.pte``, ``.ptd`` and ``.bpte`` files).

    ``writer``: the executorch release that wrote it (None: unknown); ``features``: the format
    features its files use (names of :data:`FEATURES`); ``backends``: the delegates it calls.
    """

    files: tuple[FileFormat, ...]
    writer: Version | None
    features: tuple[str, ...]
    backends: tuple[str, ...] = ()

    @property
    def minimum(self) -> Version:
        """The oldest runtime whose reader knows every feature the files use."""
        return max((FEATURES[f].minimum for f in self.features), default=(0, 1, 0))

    @property
    def guaranteed(self) -> tuple[Version, Version] | None:
        return guaranteed_range(self.writer) if self.writer is not None else None

    def judge(self, runtime: Version) -> Judgement:
        """Whether ``runtime`` can load the program, and what the policy says about it."""
        reasons = [
            f"{FEATURES[f].what} needs runtime >= {version_text(FEATURES[f].minimum)}"
            for f in self.features
            if FEATURES[f].minimum > runtime
        ]
        for file in self.files:
            for gate in SCHEMA_GATES:
                if gate.identifier == file.identifier and runtime >= gate.since and file.schema_version > gate.max_version:
                    reasons.append(
                        f"{file.name} has schema version {file.schema_version}, runtimes since "
                        f"{version_text(gate.since)} read at most {gate.max_version}"
                    )
        note = ""
        if not reasons and self.guaranteed is not None:
            low, high = self.guaranteed
            writer = version_text(low)
            if runtime < low:
                note = (f"runtime {version_text(runtime)} is older than the ExecuTorch {writer} that wrote it: "
                        "every format feature it uses is older, but ExecuTorch does not guarantee forward compatibility")
                if self.backends:
                    note += f" (and the payloads of {', '.join(self.backends)} have formats of their own)"
            elif runtime >= high:
                note = (f"runtime {version_text(runtime)} is past the {writer} to {high[0]}.{high[1] - 1}.x that "
                        "ExecuTorch's policy guarantees; it says a newer runtime possibly loads it")
        return Judgement(runtime, tuple(reasons), note)

    def to_json(self) -> dict[str, Any]:
        guaranteed = self.guaranteed
        return {
            "files": {f.name: {"format": f.identifier, "schema_version": f.schema_version} for f in self.files},
            "writer": version_text(self.writer) if self.writer is not None else None,
            "minimum": version_text(self.minimum),
            "guaranteed": (f">={version_text(guaranteed[0])},<{version_text(guaranteed[1])}" if guaranteed else None),
            "requires": {f: version_text(FEATURES[f].minimum) for f in self.features},
            "backends": list(self.backends),
        }

    @classmethod
    def from_json(cls, data: Any) -> RuntimeSupport:
        """Raises ValueError (or TypeError) for anything but what :meth:`to_json` writes."""
        if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
            raise ValueError("expected a table with files")
        files = []
        for name, info in sorted(data["files"].items()):
            if not isinstance(info, dict) or not isinstance(info.get("format"), str) or not isinstance(info.get("schema_version"), int):
                raise ValueError(f"files.{name}: expected format and schema_version")
            files.append(FileFormat(str(name), info["format"], info["schema_version"]))
        writer = data.get("writer")
        parsed = parse_version(writer) if isinstance(writer, str) else None
        if writer is not None and parsed is None:
            raise ValueError(f"writer: {writer!r} is not a version")
        requires = data.get("requires") or {}
        if not isinstance(requires, dict):
            raise ValueError("requires: expected a table")
        features = tuple(sorted(f for f in requires if f in FEATURES))  # a newer ptebuild's features are dropped
        backends = data.get("backends") or []
        if not isinstance(backends, list) or not all(isinstance(b, str) for b in backends):
            raise ValueError("backends: expected a list of strings")
        return cls(tuple(files), parsed, features, tuple(backends))


def program_support(pte: str | Path, data: Iterable[str | Path] = (), bpte: str | Path | None = None,
                    writer: str | None = None) -> RuntimeSupport:
    """The runtimes that load the program ``pte`` with its ``.ptd`` files ``data`` (and its
    ``.bpte``); ``writer``: the executorch version that wrote them (a toolchain input).

    Raises:
        FormatError: a file is not what its name says, or is corrupt.
        OSError: a file cannot be read.
    """
    from ptebuild.runtime.pte_file import FILE_IDENTIFIER, TensorDataLocation, open_pte, read_pte

    pte = Path(pte)
    features: set[str] = set()
    backends: set[str] = set()
    files = []
    with open_pte(pte) as reader:
        files.append(FileFormat(pte.name, FILE_IDENTIFIER.decode(), reader.version()))
        if reader.constant_segment_index() is not None:
            features.add("constant-segment")
        if reader.mutable_data_segment_indexes():
            features.add("mutable-data")
        if reader.named_data():
            features.add("named-data")
        for plan in reader.execution_plans():
            for op in plan.operators():
                if op.name in OPERATOR_FEATURES:
                    features.add(OPERATOR_FEATURES[op.name])
            backends.update(d.backend() for d in plan.delegates())
            if any(device.device_type != 0 for device in plan.non_const_buffer_devices()):
                features.add("device-placement")
            for value in plan.values():
                extra = value.tensor.extra if value.tensor is not None else None
                if extra is None:
                    continue
                if extra.device_type != 0:
                    features.add("device-placement")
                if extra.location == TensorDataLocation.EXTERNAL:
                    features.add("external-data")
    data_files = [Path(d) for d in data]
    if data_files or read_pte(pte).required_keys:
        features.add("external-data")
    for path in data_files:
        files.append(FileFormat(path.name, *_ptd_format(path)))
    if bpte is not None:
        from ptebuild.runtime.bpte_file import FILE_IDENTIFIER as BPTE_ID
        from ptebuild.runtime.bpte_file import read_bpte

        bpte = Path(bpte)
        files.append(FileFormat(bpte.name, BPTE_ID.decode(), read_bpte(bpte).version))
        features.add("bundled-program")
    return RuntimeSupport(
        files=tuple(files),
        writer=parse_version(writer) if writer else None,
        features=tuple(sorted(features)),
        backends=tuple(sorted(b for b in backends if b)),
    )


def _ptd_format(path: Path) -> tuple[str, int]:
    """A ``.ptd``'s identifier and ``FlatTensor.version``, read without refusing a newer version."""
    from ptebuild.errors import FormatError
    from ptebuild.runtime.file_region import read_exact
    from ptebuild.runtime.flatbuffer import U32, FlatbufferView
    from ptebuild.runtime.ptd_file import FILE_IDENTIFIER, read_ptd_header

    header = read_ptd_header(path)
    with open(path, "rb") as f:
        head = read_exact(f, str(path), 0, 8, "FlatTensor identifier")
        if head[4:8] != FILE_IDENTIFIER:
            raise FormatError(f"{path}: not a .ptd file: identifier {head[4:8]!r} at offset 4, expected {FILE_IDENTIFIER!r}")
        flatbuffer = read_exact(f, str(path), 0, header.flatbuffer_offset + header.flatbuffer_size, "FlatTensor flatbuffer")
    version = FlatbufferView(flatbuffer, str(path)).root("FlatTensor").scalar(0, "version", U32)
    return FILE_IDENTIFIER.decode(), version


def support_of_outputs(folder: str | Path, outputs: Iterable[str], writer: str | None) -> RuntimeSupport | None:
    """:func:`program_support` of a program whose outputs (file names in ``folder``) are given:
    its ``.pte``, ``.ptd`` files and ``.bpte``. None when there is no ``.pte`` or a file cannot
    be read as what its name says (verification reports those)."""
    from ptebuild.errors import FormatError

    names = sorted(outputs)
    pte = next((n for n in names if n.endswith(".pte")), None)
    if pte is None:
        return None
    bpte = next((n for n in names if n.endswith(".bpte")), None)
    folder = Path(folder)
    try:
        return program_support(folder / pte, [folder / n for n in names if n.endswith(".ptd")],
                               folder / bpte if bpte else None, writer)
    except (FormatError, OSError):
        return None
