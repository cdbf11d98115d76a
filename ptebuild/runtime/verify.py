"""Check a build's output folder against its build record, without executing anything.

For every target in ``ptebuild.json`` (see :mod:`ptebuild.runtime.record`):

- every output file must exist and have the size and SHA-256 the record gives it (a file
  that differs was changed, cut or replaced after the build);
- every program's ``.pte`` must find each named-data key it needs in its ``.ptd`` files
  (:func:`ptebuild.runtime.check`); with ``verify_bytes`` every blob of those ``.ptd``
  files is also hashed and compared with the SHA-256 its key carries.

The key check runs even when the record's digests match: a hand-edited record (or a
``.ptd`` copied in with its digest patched) is still caught by the keys. It is skipped for
a program one of whose files is missing, which is reported once, as missing.

Imports neither torch nor executorch. Raises for a folder that cannot be verified at all
(:class:`~ptebuild.errors.UsageError`, :class:`~ptebuild.errors.FormatError`); everything
wrong with the artifacts themselves is returned in the :class:`VerifyReport`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ptebuild.errors import FormatError, LoadError, UsageError
from ptebuild.hashing import hash_file
from ptebuild.runtime.record import RECORD_NAME, read_build_record


@dataclass(frozen=True)
class TargetReport:
    """What verifying one target of the record found."""

    name: str
    kind: str
    files: tuple[str, ...]
    """The target's output files, relative to the folder, as the record lists them."""
    problems: tuple[str, ...] = ()
    """One complete sentence per problem; empty when the target is fine."""
    notes: tuple[str, ...] = ()
    """Limits of the check that are not failures (e.g. delegate blobs whose keys cannot be read)."""
    keys_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "ok": self.ok,
            "files": list(self.files),
            "problems": list(self.problems),
            "notes": list(self.notes),
            "keys_checked": self.keys_checked,
        }


@dataclass(frozen=True)
class VerifyReport:
    folder: Path
    verify_bytes: bool
    targets: tuple[TargetReport, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.targets)

    @property
    def failed(self) -> tuple[TargetReport, ...]:
        return tuple(t for t in self.targets if not t.ok)

    def to_json(self) -> dict:
        return {
            "folder": str(self.folder),
            "record": str(self.folder / RECORD_NAME),
            "bytes": self.verify_bytes,
            "ok": self.ok,
            "targets": [t.to_json() for t in self.targets],
        }


def verify_folder(folder: str | Path, verify_bytes: bool = False) -> VerifyReport:
    """Verify every target of the build record in ``folder``.

    Raises:
        UsageError: ``folder`` is not a folder or holds no ``ptebuild.json``.
        FormatError: the record is malformed.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such folder (give the output folder of a build)")
    record = read_build_record(folder)
    if record is None:
        raise UsageError(f"{folder}: no {RECORD_NAME} (not the output folder of a ptebuild build?)")
    programs = record.programs
    reports = []
    for name, entry in sorted(record.targets.items()):
        kind = str(entry.get("kind", "?"))
        problems: list[str] = []
        missing = False
        for file, info in sorted(entry["outputs"].items()):
            path = folder / file
            missing = missing or not path.exists()
            problem = _check_file(path, info)
            if problem is not None:
                problems.append(problem)
        notes: tuple[str, ...] = ()
        keys_checked = 0
        if kind == "program":
            files = programs[name]
            if not files.pte:
                problems.append("the record lists no .pte for this program")
            elif not missing:
                try:
                    keys_checked, notes = _check_keys(folder, files.pte, files.data, verify_bytes)
                except (LoadError, FormatError) as exc:
                    problems.append(_relative(str(exc), folder))
                except OSError as exc:
                    problems.append(f"cannot read: {exc.filename}: {exc.strerror}")
        reports.append(
            TargetReport(
                name=name,
                kind=kind,
                files=tuple(sorted(entry["outputs"])),
                problems=tuple(problems),
                notes=notes,
                keys_checked=keys_checked,
            )
        )
    return VerifyReport(folder=folder, verify_bytes=verify_bytes, targets=tuple(reports))


def _check_file(path: Path, info: dict) -> str | None:
    """A one-line problem with ``path`` against its record entry, or None if it matches."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return f"{path.name}: missing"
    except OSError as exc:
        return f"{path.name}: cannot read: {exc.strerror}"
    if size != info["bytes"]:
        return f"{path.name}: {size} bytes, the record says {info['bytes']} (changed after the build)"
    try:
        digest = hash_file(path)[0]
    except OSError as exc:
        return f"{path.name}: cannot read: {exc.strerror}"
    if digest != info["sha256"]:
        return (
            f"{path.name}: sha256 mismatch: {digest[:12]}..., the record says "
            f"{info['sha256'][:12]}... (changed after the build)"
        )
    return None


def _check_keys(folder: Path, pte: str, data: tuple[str, ...], verify_bytes: bool) -> tuple[int, tuple[str, ...]]:
    from ptebuild.runtime import check

    checked = check(folder / pte, [folder / d for d in data], verify_bytes=verify_bytes)
    notes = tuple(
        f"{pte}: method {method!r} has a {backend} delegate blob whose keys cannot be listed"
        for method, backend in checked.pte.opaque_delegates
    )
    return len(checked.pte.required_keys), notes


def _relative(message: str, folder: Path) -> str:
    """``message`` with the folder prefix dropped from the paths it names: the line is about files in it."""
    return message.replace(f"{folder}{os.sep}", "")
