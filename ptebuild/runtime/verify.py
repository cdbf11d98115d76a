"""Check a build's output folder against its build record, without executing anything.

For every target in ``ptebuild.json`` (see :mod:`ptebuild.runtime.record`):

- every output file must exist and have the size and SHA-256 the record gives it (a file
  that differs was changed, cut or replaced after the build);
- every program's ``.pte`` must find each named-data key it needs in its ``.ptd`` files
  (:func:`ptebuild.runtime.check`); with ``verify_bytes`` every blob of those ``.ptd``
  files is also hashed and compared with the SHA-256 its key carries.

A program's ``.bpte`` (``bundle_io``) must bundle exactly its ``.pte``'s bytes, with test cases
that fit its methods (:func:`~ptebuild.runtime.bpte_file.check_suites`). With ``runtime`` (an
ExecuTorch runtime version), each program's files are judged against it
(:mod:`ptebuild.runtime.compat`): what that runtime cannot load is a problem, what upstream's
policy does not guarantee a note.

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
from typing import Any

from ptebuild.errors import DAMAGED, FormatError, LoadError, UsageError
from ptebuild.hashing import hash_file
from ptebuild.runtime.compat import RuntimeSupport, Version, version_text
from ptebuild.runtime.record import RECORD_NAME, ProgramFiles, read_build_record


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
    runtime: dict[str, Any] | None = None
    """With a runtime to judge against: the runtimes that load the program (``RuntimeSupport.to_json()``)."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "ok": self.ok,
            "files": list(self.files),
            "problems": list(self.problems),
            "notes": list(self.notes),
            "keys_checked": self.keys_checked,
            **({"runtime": self.runtime} if self.runtime is not None else {}),
        }


@dataclass(frozen=True)
class VerifyReport:
    folder: Path
    verify_bytes: bool
    targets: tuple[TargetReport, ...] = field(default=())
    runtime: str | None = None
    """The runtime version the programs were judged against (None: not asked)."""

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.targets)

    @property
    def failed(self) -> tuple[TargetReport, ...]:
        return tuple(t for t in self.targets if not t.ok)

    def to_json(self) -> dict[str, Any]:
        return {
            "folder": str(self.folder),
            "record": str(self.folder / RECORD_NAME),
            "bytes": self.verify_bytes,
            "runtime": self.runtime,
            "ok": self.ok,
            "targets": [t.to_json() for t in self.targets],
        }


def verify_folder(folder: str | os.PathLike[str], verify_bytes: bool = False, runtime: Version | None = None) -> VerifyReport:
    """Verify every target of the build record in ``folder`` (``runtime``: also judge each program
    against that ExecuTorch runtime version).

    Raises:
        UsageError: ``folder`` is not a folder or holds no ``ptebuild.json``.
        FormatError: the record is malformed.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such folder; give the output folder of a build")
    record = read_build_record(folder)
    if record is None:
        raise UsageError(f"{folder}: no {RECORD_NAME}; give the output folder of a ptebuild build")
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
        support = None
        if kind == "program":
            files = programs[name]
            if not files.pte:
                problems.append("the record lists no .pte for this program")
            elif not missing:
                try:
                    keys_checked, notes = _check_keys(folder, files.pte, files.data, verify_bytes)
                    if files.bpte:
                        problems += _check_bpte(folder, files.pte, files.bpte)
                    if runtime is not None:
                        support, problem, note = _check_runtime(folder, files, entry, runtime)
                        problems += [problem] if problem else []
                        notes += (note,) if note else ()
                except (LoadError, FormatError) as exc:
                    problems.append(_relative(str(exc.with_fix(DAMAGED) if isinstance(exc, FormatError) else exc), folder))
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
                runtime=support.to_json() if support is not None else None,
            )
        )
    return VerifyReport(folder=folder, verify_bytes=verify_bytes, targets=tuple(reports),
                        runtime=version_text(runtime) if runtime is not None else None)


def _check_bpte(folder: Path, pte: str, bpte: str) -> list[str]:
    """A ``.bpte`` against its program: the very bytes of the ``.pte``, test cases that fit it."""
    from ptebuild.runtime.bpte_file import check_suites, read_bpte
    from ptebuild.runtime.file_region import sha256_of_range

    bundled = read_bpte(folder / bpte)
    with open(folder / bpte, "rb") as f:
        inside = sha256_of_range(f, bpte, bundled.program_offset, bundled.program_size, "bundled program")
    if inside != hash_file(folder / pte)[0] or bundled.program_size != (folder / pte).stat().st_size:
        return [f"{bpte}: bundles another program than {pte} (sha256 {inside[:12]}...)"]
    return [f"{bpte}: {problem}" for problem in check_suites(folder / pte, bundled.suites)]


def _check_runtime(
    folder: Path, files: ProgramFiles, entry: dict[str, Any], runtime: Version
) -> tuple[RuntimeSupport, str | None, str | None]:
    """``(support, problem or None, note or None)`` of a program for one runtime version."""
    from ptebuild.keyinputs import toolchain
    from ptebuild.runtime.compat import program_support

    writer = (entry.get("inputs") or {}).get(toolchain("executorch"))
    support = program_support(folder / files.pte, [folder / d for d in files.data],
                              folder / files.bpte if files.bpte else None, writer)
    judged = support.judge(runtime)
    problem = f"runtime {version_text(runtime)} cannot load it: {'; '.join(judged.cannot_load)}" if not judged.loads else None
    return support, problem, judged.note or None


def _check_file(path: Path, info: dict[str, Any]) -> str | None:
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

    # A program's keys may be split over its files by design (a LoRA program: foundation and adapter).
    checked = check(folder / pte, [folder / d for d in data], verify_bytes=verify_bytes, allow_split=True)
    notes = tuple(
        f"{pte}: method {method!r} has a {backend} delegate blob whose keys cannot be listed"
        for method, backend in checked.pte.opaque_delegates
    )
    return len(checked.pte.required_keys), notes


def _relative(message: str, folder: Path) -> str:
    """``message`` with the folder prefix dropped from the paths it names: the line is about files in it."""
    return message.replace(f"{folder}{os.sep}", "")
