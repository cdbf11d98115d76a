"""The build record: ``ptebuild.json`` in every output folder.

It says which program (or shim library) wrote each file, with the file's SHA-256 and size, so
that ``ptebuild verify`` can check the folder later and the loader can say which program a
``.ptd`` was built for. Format (JSON, keys sorted)::

    {"format": "ptebuild-record", "version": 1,
     "manifest": "manifests/robot.toml",
     "targets": {"policy": {"kind": "program", "backend": "portable", "key": "...",
                            "manifest": "../../manifests/robot.toml",
                            "data_name": "policy_weights",
                            "methods": ["encode_observation", "predict_actions"],
                            "outputs": {"policy.pte": {"sha256": "...", "bytes": 75040},
                                        "policy_weights.ptd": {...}},
                            "runtime": {"files": {"policy.pte": {"format": "ET12", "schema_version": 0}, ...},
                                        "writer": "1.5.1", "minimum": "0.7.0", "guaranteed": ">=1.5.1,<1.7.0",
                                        "requires": {"external-data": "0.7.0", ...}, "backends": ["<delegate id>", ...]}},
                 "shims_lib": {"kind": "shims", "key": "...", "outputs": {...}}}}

A program's ``insight`` is what is inside it (:mod:`ptebuild.insight.program`: its delegation
per method and operator, its size split with its ``.ptd`` files, each method's planned memory,
mutable buffers and inputs' and outputs' bytes), for ``inspect``, ``pack`` (budgets) and ``diff``.
A program's ``runtime`` (:class:`~ptebuild.runtime.compat.RuntimeSupport`) names each of its
files' format and schema version and the ExecuTorch runtimes that load it; a ``.bpte``
(``bundle_io``) is one more output, and the program's ``bundled_io`` says how a device verifies
it with ExecuTorch's ``verify_method_outputs``: ``{"atol": 2 * max_error + 1e-5, "rtol": 0.0,
"max_error": ..., "margin": 2.0}``, derived from the largest error the check measured on the
cases the ``.bpte`` holds (its expected outputs are those of the eager model the check compared
with); a check without error figures: its ``atol``.
A program's ``checked`` (:class:`~ptebuild.figures.CheckSummary`) states what its check proves:
``{"verdict": "passed" | "proves-nothing", "tolerances": {dtype: {"atol", "rtol", "min_cosine"}},
"data": {"random": [sizes...], "samples": N}, "max_abs_error", "cosine", "reasons": [...]}``, and
its ``workarounds`` the toolchain fixes applied to it (name -> why). A program with a data name
whose backend kept weights inside the ``.pte`` lists them as ``"weights_in_pte": [{"name": ...,
"bytes": ...}]``. All were added within version 1: fields that a reader of version 1 may ignore
keep the version (its readers ignore unknown fields); a change it would misread bumps it.

File names are relative to the record's folder; a target's ``manifest`` is the path of the
manifest that built it, relative to the folder (so two manifests cannot silently overwrite each
other's files there). A build updates the entries of the targets it
built and keeps the others, so ``--only`` does not forget the rest of the folder. The record is
written atomically (temporary file, fsync, rename).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptebuild.atomic import write_atomically
from ptebuild.errors import FormatError

RECORD_NAME = "ptebuild.json"
_REBUILD = "build the folder again with `ptebuild build MANIFEST` (it rewrites the record)"
FORMAT = "ptebuild-record"
VERSION = 1


BUNDLED_IO_MARGIN = 2.0
"""A ``.bpte``'s ``atol`` is this many times the largest error the check measured, plus the floor."""
BUNDLED_IO_FLOOR = 1e-5
"""...plus ``torch.testing.assert_close``'s ``atol`` of float outputs: rounding of another CPU."""


def bundled_io_entry(atol: float, max_error: float | None = None) -> dict[str, float]:
    """A program's ``bundled_io``: the tolerances of ``verify_method_outputs`` for its ``.bpte``.

    With ``max_error`` (the largest error the check measured on the cases the ``.bpte`` holds):
    ``atol = 2 * max_error + 1e-5``; without (a check with no error figures): the check's ``atol``."""
    if max_error is None:
        return {"atol": float(atol), "rtol": 0.0}
    derived = BUNDLED_IO_MARGIN * float(max_error) + BUNDLED_IO_FLOOR
    return {"atol": derived, "rtol": 0.0, "max_error": float(max_error), "margin": BUNDLED_IO_MARGIN}


@dataclass(frozen=True)
class ProgramFiles:
    """The files one program was built into: a ``.pte`` and its ``.ptd`` files."""

    pte: str
    data: tuple[str, ...]
    bpte: str | None = None


@dataclass(frozen=True)
class RecordEntry:
    """One target's entry in the record: what wrote which files, from what.

    ``inputs`` (the action key's breakdown: manifest entries, sources, weights, toolchain) and
    ``deps`` (what the lowering was found to use) keep, beside the files, what release
    packaging needs later without the cache (the lockfile, provenance).
    """

    kind: str
    manifest: str
    key: str
    outputs: tuple[tuple[str, str, int], ...]
    """``(file name, sha256, size)`` of each file, as published."""
    inputs: dict[str, str] = field(default_factory=dict)
    deps: dict[str, dict[str, str]] = field(default_factory=dict)
    backend: str | None = None
    check: str = ""
    data_name: str | None = None
    methods: tuple[str, ...] = ()
    shared_data: str | None = None
    runtime: dict[str, Any] | None = None
    """The runtimes that load the program (``RuntimeSupport.to_json()``, :mod:`ptebuild.runtime.compat`)."""
    bundled_io: dict[str, float] | None = None
    """How a device verifies the program's ``.bpte`` (:func:`bundled_io_entry`), if it has one."""
    weights_in_pte: tuple[dict[str, Any], ...] = ()
    """A program with a data name: the weights its backend could not place in the ``.ptd``
    (``{"name", "bytes"}`` each, :mod:`ptebuild.runtime.weights_in_pte`); absent when none."""
    checked: dict[str, Any] | None = None
    """What the program's check proves (:meth:`ptebuild.figures.CheckSummary.to_json`): its
    verdict, the tolerances by dtype, the data it ran on, the largest error; None: no error figures."""
    workarounds: dict[str, str] | None = None
    """Fixes of known toolchain faults applied to the program: name -> what and why."""
    insight: dict[str, Any] | None = None
    """What is inside the program (``ProgramInsight.to_json()``), None if unknown."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": self.kind,
            "manifest": self.manifest,
            "key": self.key,
            "outputs": {name: {"sha256": sha256, "bytes": size} for name, sha256, size in self.outputs},
            "inputs": dict(self.inputs),
            "deps": dict(self.deps),
        }
        if self.kind == "program":
            data.update(backend=self.backend, check=self.check, data_name=self.data_name, methods=list(self.methods))
        if self.shared_data:
            data["shared_data"] = self.shared_data
        if self.runtime is not None:
            data["runtime"] = dict(self.runtime)
        if self.bundled_io is not None:
            data["bundled_io"] = dict(self.bundled_io)
        if self.weights_in_pte:
            data["weights_in_pte"] = [dict(w) for w in self.weights_in_pte]
        if self.checked is not None:
            data["checked"] = dict(self.checked)
        if self.workarounds:
            data["workarounds"] = dict(self.workarounds)
        if self.insight is not None:
            data["insight"] = dict(self.insight)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RecordEntry:
        return cls(
            kind=str(data.get("kind", "program")),
            manifest=str(data.get("manifest", "")),
            key=str(data.get("key", "")),
            outputs=tuple((n, i["sha256"], i["bytes"]) for n, i in sorted(data["outputs"].items())),
            inputs=dict(data.get("inputs") or {}),
            deps=dict(data.get("deps") or {}),
            backend=data.get("backend"),
            check=str(data.get("check") or ""),
            data_name=data.get("data_name"),
            methods=tuple(data.get("methods") or ()),
            shared_data=data.get("shared_data"),
            runtime=data.get("runtime") if isinstance(data.get("runtime"), dict) else None,
            bundled_io=data.get("bundled_io") if isinstance(data.get("bundled_io"), dict) else None,
            weights_in_pte=tuple(w for w in data.get("weights_in_pte") or () if isinstance(w, dict)),
            checked=data.get("checked") if isinstance(data.get("checked"), dict) else None,
            workarounds=data.get("workarounds") if isinstance(data.get("workarounds"), dict) else None,
            insight=data.get("insight") if isinstance(data.get("insight"), dict) else None,
        )


@dataclass(frozen=True)
class BuildRecord:
    path: Path
    targets: dict[str, dict[str, Any]]
    """Target name -> its entry, as in the format above."""

    def entries(self) -> dict[str, RecordEntry]:
        """The targets as typed entries."""
        return {name: RecordEntry.from_json(entry) for name, entry in sorted(self.targets.items())}

    @property
    def programs(self) -> dict[str, ProgramFiles]:
        return {
            name: ProgramFiles(
                pte=next((f for f in entry["outputs"] if f.endswith(".pte")), ""),
                data=tuple(sorted(f for f in entry["outputs"] if f.endswith(".ptd"))),
                bpte=next((f for f in entry["outputs"] if f.endswith(".bpte")), None),
            )
            for name, entry in sorted(self.targets.items())
            if entry.get("kind") == "program"
        }

    def programs_using(self, file: Path) -> list[str]:
        """Names of programs that wrote ``file``: same folder, same name, and the same bytes.

        Comparing the content too matters: a ``.ptd`` copied over another one keeps the name
        but is not what the record says it is.
        """
        if file.resolve().parent != self.path.resolve().parent:
            return []
        owners = []
        for name, entry in sorted(self.targets.items()):
            info = entry["outputs"].get(file.name)
            if entry.get("kind") == "program" and info is not None and file_matches(file, info["sha256"], info["bytes"]):
                owners.append(name)
        return owners


def file_matches(file: Path, sha256: str, size: int, digest_file: Callable[[Path], tuple[str, int]] | None = None) -> bool:
    """True if ``file`` exists with exactly ``size`` bytes hashing to ``sha256``.

    ``digest_file`` (path -> (sha256, size)) may be a stat-cached digest; the default reads the file.
    """
    if digest_file is None:
        from ptebuild.hashing import hash_file

        digest_file = hash_file
    try:
        return file.stat().st_size == size and digest_file(file)[0] == sha256
    except OSError:
        return False


def empty_record() -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "targets": {}}


def validate_record(path: Path, document: object) -> dict[str, Any]:
    """``document`` as a build record read from ``path``; FormatError (naming ``path``) if it is not one."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise FormatError(f"{path}: not a ptebuild build record (no \"format\": \"{FORMAT}\"); {_REBUILD}")
    if document.get("version") != VERSION:
        raise FormatError(f"{path}: build record version {document.get('version')!r}, this ptebuild reads {VERSION}; {_REBUILD}")
    targets = document.get("targets")
    if not isinstance(targets, dict):
        raise FormatError(f"{path}: 'targets' must be an object of target name to entry; {_REBUILD}")
    for name, entry in targets.items():
        where = f"{path}: targets.{name}"
        if not isinstance(entry, dict) or not isinstance(entry.get("outputs"), dict):
            raise FormatError(f"{where}.outputs must be an object of file name to digest; {_REBUILD}")
        for file, info in entry["outputs"].items():
            if (
                not isinstance(info, dict)
                or not isinstance(info.get("sha256"), str)
                or not isinstance(info.get("bytes"), int)
                or Path(file).name != file
            ):
                raise FormatError(f"{where}.outputs.{file}: needs a plain file name with sha256 and bytes; {_REBUILD}")
    return document


def read_record_document(folder: Path) -> dict[str, Any] | None:
    """The raw record in ``folder`` (validated), or None if there is none. Raises FormatError."""
    path = folder / RECORD_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FormatError(f"{path}: cannot read: {exc.strerror}; {_REBUILD}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"{path}: not valid JSON: {exc}; {_REBUILD}") from None
    return validate_record(path, document)


def read_build_record(folder: Path) -> BuildRecord | None:
    """The record in ``folder``, or None if there is none. Raises FormatError if it is malformed."""
    document = read_record_document(folder)
    if document is None:
        return None
    return BuildRecord(folder / RECORD_NAME, document["targets"])


def update_record(folder: Path, manifest: str | None, entries: Mapping[str, RecordEntry | dict[str, Any]]) -> None:
    """Merge ``entries`` (target name -> entry) into the record in ``folder``.

    Builders sharing a folder serialise their updates with an flock on the folder itself, so
    none loses another's entries. An unreadable record is replaced: it describes files this
    build is rewriting anyway. A no-op build writes nothing.
    """
    documents = {name: e.to_json() if isinstance(e, RecordEntry) else e for name, e in entries.items()}
    if _merged(folder, manifest, documents)[1] is None:
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)
        _document, text = _merged(folder, manifest, documents)
        if text is not None:
            write_atomically(folder / RECORD_NAME, text.encode())
    finally:
        os.close(fd)  # releases the lock


def _merged(folder: Path, manifest: str | None, entries: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], str | None]:
    """The record with ``entries`` merged in, and its text, or None for the text if unchanged."""
    try:
        document = read_record_document(folder) or empty_record()
    except FormatError:
        document = empty_record()
    before = json.dumps(document, sort_keys=True)
    if manifest is not None:
        document["manifest"] = manifest
    # An entry whose files were just rewritten by another target is stale (a renamed program).
    written = {name for entry in entries.values() for name in entry["outputs"]}
    for owner in [t for t in document["targets"] if t not in entries]:
        outputs = document["targets"][owner]["outputs"]
        for name in written & set(outputs):
            del outputs[name]
        if not outputs:
            del document["targets"][owner]
    document["targets"].update(entries)
    if json.dumps(document, sort_keys=True) == before and (folder / RECORD_NAME).is_file():
        return document, None
    return document, json.dumps(document, sort_keys=True, indent=1) + "\n"
