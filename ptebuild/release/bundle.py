"""Verify a release bundle (``.tar.gz``, ``.tgz``, ``.zip``) without unpacking it.

Two passes over the archive:

1. **Entries.** Every entry is judged by its header alone, and each unsafe one gets one line:
   an absolute path or drive letter, a backslash, ``..`` or ``.`` or empty components, a
   symbolic or hard link, a device or FIFO or anything else that is not a plain file or a
   folder, a name that appears twice, two names that differ only in case (one file on macOS
   and Windows), an entry outside the bundle's one top folder. If any entry is unsafe,
   nothing is read further.
2. **Contents.** Each file is streamed once through SHA-256 and compared with
   ``SHA256SUMS`` (every file listed, every listed file present); the provenance statement's
   subjects are compared with the files (every ``.pte``/``.ptd`` a subject), and so is the
   manifest's digest among its external parameters; the lock, when
   there is one, is compared with the bundle's build record, and the manifest with the record
   (every program built from the entries the manifest holds: :mod:`.consistency`); the record's targets are
   verified as :func:`~ptebuild.runtime.verify.verify_folder` does (sizes, digests, every
   ``.pte``'s keys in its ``.ptd``, every blob's bytes against its key, every ``.bpte`` against
   its ``.pte``, and with ``runtime`` every program against that ExecuTorch runtime); and
   ``selected_operators.yaml``, when there is one, must list what the ``.pte`` files call.

The runtime readers (:func:`~ptebuild.runtime.read_pte`, ``read_ptd``) take paths, so for the
last check the build record and the outputs it names are copied, while they are hashed, into
a private temporary folder (mode 0700, removed afterwards) under names already checked to be
plain file names. Nothing is ever written where the archive's names point.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tarfile
import tempfile
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import IO, Any

from ptebuild.errors import FormatError, UsageError
from ptebuild.hashing import hash_chunks
from ptebuild.names import case_key
from ptebuild.release.archive import archive_format
from ptebuild.release.lock import LOCK_NAME, compare_lock, loads_lock, lock_entries_from_record
from ptebuild.release.pack import SUMS_NAME
from ptebuild.release.provenance import PROVENANCE_NAME, subjects_of
from ptebuild.runtime.compat import Version, version_text
from ptebuild.runtime.oplist import OPLIST_NAME
from ptebuild.runtime.record import RECORD_NAME
from ptebuild.runtime.verify import TargetReport

_CHUNK = 1 << 20
#: Files read into memory (the metadata of a bundle) must be smaller than this.
_METADATA_LIMIT = 16 << 20
_SUMS_LINE = re.compile(r"([0-9a-f]{64}) [ *](.+)")
_DRIVE = re.compile(r"[A-Za-z]:")
_ARTIFACT_SUFFIXES = (".pte", ".ptd")


@dataclass(frozen=True)
class _Member:
    """An archive entry as its header describes it. ``kind``: file, dir, symlink, hardlink, device, fifo, other."""

    name: str
    kind: str
    size: int
    link: str
    handle: Any


Opener = Callable[[_Member], IO[bytes]]
"""Opens a file entry of the archive for reading."""


@dataclass(frozen=True)
class BundleReport:
    """What verifying a bundle found. ``problems``: one line each about the archive itself."""

    path: Path
    folder: str | None
    files: tuple[str, ...] = ()
    """The bundle's files, relative to its folder."""
    problems: tuple[str, ...] = ()
    targets: tuple[TargetReport, ...] = field(default=())
    runtime: str | None = None
    """The runtime version the programs were judged against (None: not asked)."""

    @property
    def ok(self) -> bool:
        return not self.problems and all(t.ok for t in self.targets)

    @property
    def failed(self) -> tuple[TargetReport, ...]:
        return tuple(t for t in self.targets if not t.ok)

    def to_json(self) -> dict[str, Any]:
        return {
            "bundle": str(self.path),
            "folder": self.folder,
            "runtime": self.runtime,
            "ok": self.ok,
            "files": list(self.files),
            "problems": list(self.problems),
            "targets": [t.to_json() for t in self.targets],
        }


def is_bundle_path(path: str | os.PathLike[str]) -> bool:
    """True if ``path``'s name ends like an archive ptebuild packs."""
    try:
        archive_format(path)
    except UsageError:
        return False
    return True


def verify_bundle(path: str | os.PathLike[str], runtime: Version | None = None) -> BundleReport:
    """Verify the bundle at ``path`` (see the module docstring); never unpacks it. ``runtime``:
    also judge each program against that ExecuTorch runtime version.

    Raises:
        UsageError: ``path`` is not a file, or not named ``.tar.gz``/``.tgz``/``.zip``.
        FormatError: the archive itself cannot be read (not gzip/tar/zip, cut short).
    """
    path = Path(path)
    archive_format(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such file (give a bundle written by `ptebuild pack`)")
    with _open_archive(path) as (members, read):
        problems, folder = _unsafe_entries(path, members)
        if problems:
            return BundleReport(path, folder, problems=tuple(problems))
        files = {m.name[len(folder) + 1:]: m for m in members if m.kind == "file"}
        report = _verify_contents(path, folder, files, read, runtime)
        return replace(report, runtime=version_text(runtime)) if runtime is not None else report


@contextmanager
def bundle_files(path: str | Path) -> Iterator[tuple[str, dict[str, _Member], Opener]]:
    """Yields a bundle's folder, its files (name inside the folder -> entry) and a function
    opening an entry for reading; never unpacks it.

    Raises:
        UsageError: ``path`` is not a bundle's name or file, or it holds an unsafe entry (the
            first one named).
        FormatError: the archive cannot be read.
    """
    path = Path(path)
    archive_format(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such file (give a bundle written by `ptebuild pack`)")
    with _open_archive(path) as (members, read):
        problems, folder = _unsafe_entries(path, members)
        if problems:
            raise UsageError(problems[0])
        yield folder, {m.name[len(folder) + 1:]: m for m in members if m.kind == "file"}, read


@contextmanager
def _open_archive(path: Path) -> Iterator[tuple[list[_Member], Opener]]:
    """Yields the archive's members and a function opening one (a file) for reading."""
    fmt = archive_format(path)
    try:
        if fmt == "zip":
            with zipfile.ZipFile(path) as zf:
                members = [_zip_member(info) for info in zf.infolist()]
                yield members, lambda m: zf.open(m.handle)
        else:
            with tarfile.open(path, mode="r:gz") as tar:
                members = [_tar_member(info) for info in tar.getmembers()]

                def extract(m: _Member) -> IO[bytes]:
                    f = tar.extractfile(m.handle)
                    if f is None:  # a tar opens files only; only the bundle's files are opened
                        raise FormatError(f"{path}: {m.name}: not a file; give a bundle written by `ptebuild pack`")
                    return f

                yield members, extract
    except (tarfile.TarError, zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
        if isinstance(exc, OSError) and exc.filename is not None:
            raise UsageError(f"{path}: cannot read: {exc.strerror}; give a bundle you can read") from None
        raise FormatError(f"{path}: not a readable {fmt} archive: {exc} (cut short or corrupt?); pack it again") from None


def _tar_member(info: tarfile.TarInfo) -> _Member:
    if info.isreg():
        kind = "file"
    elif info.isdir():
        kind = "dir"
    elif info.issym():
        kind = "symlink"
    elif info.islnk():
        kind = "hardlink"
    elif info.ischr() or info.isblk():
        kind = "device"
    elif info.isfifo():
        kind = "fifo"
    else:
        kind = "other"
    return _Member(info.name, kind, info.size, info.linkname, info)


def _zip_member(info: zipfile.ZipInfo) -> _Member:
    # Only Unix-made entries carry a mode (with its file type) in the high 16 bits.
    mode = info.external_attr >> 16 if info.create_system == 3 else 0
    if stat.S_ISLNK(mode):
        kind = "symlink"
    elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        kind = "device"
    elif stat.S_ISFIFO(mode):
        kind = "fifo"
    elif info.is_dir() or stat.S_ISDIR(mode):
        kind = "dir"
    elif stat.S_IFMT(mode) == 0 or stat.S_ISREG(mode):
        kind = "file"
    else:
        kind = "other"
    return _Member(info.filename, kind, info.file_size, "", info)


_KIND_REASONS = {
    "hardlink": "a hard link",
    "device": "a device file",
    "fifo": "a FIFO",
    "other": "not a plain file or folder",
}


def _unsafe_entries(path: Path, members: list[_Member]) -> tuple[list[str], str]:
    """One line per unsafe entry, and the bundle's folder."""
    folder = _bundle_folder(members)
    problems: list[str] = []

    def refuse(name: str, reason: str) -> None:
        problems.append(f"{path.name}: entry {name!r}: {reason}; refused (a bundle holds plain files in one folder)")

    for member in members:
        name = member.name
        parts = name.rstrip("/").split("/") if name.rstrip("/") else []
        if not name or "\0" in name:
            refuse(name, "an empty name or a NUL byte")
        elif name.startswith("/") or _DRIVE.match(name):
            refuse(name, "an absolute path")
        elif "\\" in name:
            refuse(name, "a backslash in the name")
        elif ".." in parts:
            refuse(name, "'..' in the path")
        elif any(part in ("", ".") for part in parts):
            refuse(name, "empty or '.' components in the path")
        elif member.kind == "symlink":
            refuse(name, f"a symbolic link (to {member.link!r})" if member.link else "a symbolic link")
        elif member.kind in _KIND_REASONS:
            refuse(name, _KIND_REASONS[member.kind] + (f" (to {member.link!r})" if member.link else ""))
        elif parts[0] != folder or (len(parts) == 1 and member.kind != "dir"):
            refuse(name, f"outside the bundle folder {folder}/")
    normalised = [m.name.rstrip("/") for m in members]
    for name, count in sorted(Counter(normalised).items()):
        if count > 1:
            refuse(name, f"appears {count} times")
    by_case: dict[str, list[str]] = {}
    for name in sorted(set(normalised)):
        by_case.setdefault(case_key(name), []).append(name)
    for names in by_case.values():
        if len(names) > 1:
            refuse(names[1], f"differs from {names[0]!r} only in case (one file on macOS and Windows)")
    return problems, folder


def _bundle_folder(members: list[_Member]) -> str:
    """The folder holding ``SHA256SUMS`` (else the first entry's top folder)."""
    sums = [m.name.split("/")[0] for m in members if m.name.count("/") == 1 and m.name.endswith("/" + SUMS_NAME)]
    if len(sums) == 1:
        return sums[0]
    return members[0].name.split("/")[0] if members else ""


def _verify_contents(path: Path, folder: str, files: dict[str, _Member], read: Opener, runtime: Version | None = None) -> BundleReport:
    problems: list[str] = []
    prefix = f"{path.name}: {folder}/"
    metadata = {}
    for name in (SUMS_NAME, RECORD_NAME, PROVENANCE_NAME, LOCK_NAME, OPLIST_NAME):
        member = files.get(name)
        if member is None:
            if name not in (LOCK_NAME, OPLIST_NAME):
                problems.append(f"{prefix}{name}: missing (not a bundle written by `ptebuild pack`?)")
            continue
        if member.size > _METADATA_LIMIT:
            problems.append(f"{prefix}{name}: {member.size} bytes, too large for a bundle's {name}")
            continue
        with read(member) as f:
            metadata[name] = f.read()
    record = _parse_record(metadata.get(RECORD_NAME), prefix, problems)
    outputs = {file for entry in (record or {}).get("targets", {}).values() for file in entry["outputs"]}
    manifest = (record or {}).get("manifest")
    manifest = manifest if isinstance(manifest, str) and manifest in files and "/" not in manifest else None
    with tempfile.TemporaryDirectory(prefix="ptebuild-verify-") as scratch:
        digests = {}
        aside = Path(scratch, ".manifest")
        aside.mkdir()
        for name, member in files.items():  # archive order: a .tar.gz is read front to back once
            copy_to = Path(scratch, name) if name in outputs and "/" not in name else None
            if name == manifest and member.size <= _METADATA_LIMIT:
                copy_to = aside / name
            with read(member) as f:
                digests[name] = _hash_stream(f, copy_to)
        if record is not None:
            Path(scratch, RECORD_NAME).write_text(json.dumps(record), encoding="utf-8")
        problems += _check_sums(metadata.get(SUMS_NAME), digests, prefix)
        problems += _check_provenance(metadata.get(PROVENANCE_NAME), digests, outputs, prefix)
        if record is not None and LOCK_NAME in metadata:
            problems += _check_lock(metadata[LOCK_NAME], record, prefix)
        if record is not None:
            problems += _check_manifest(aside / manifest if manifest else None, record, prefix)
        targets: tuple[TargetReport, ...] = ()
        if record is not None:
            from ptebuild.runtime.verify import verify_folder

            targets = verify_folder(scratch, verify_bytes=True, runtime=runtime).targets
            if OPLIST_NAME in metadata:
                problems += _check_oplist(metadata[OPLIST_NAME], record, Path(scratch), prefix)
    return BundleReport(path, folder, tuple(sorted(files)), tuple(problems), targets)


def _check_oplist(data: bytes, record: dict[str, Any], scratch: Path, prefix: str) -> list[str]:
    """The bundle's operator list against the one its ``.pte`` files give."""
    from ptebuild.runtime.oplist import merge, program_operators, selected_operators_yaml

    ptes = sorted(file for entry in record["targets"].values() if entry.get("kind", "program") == "program"
                  for file in entry["outputs"] if file.endswith(".pte") and (scratch / file).is_file())
    try:
        expected = selected_operators_yaml(merge(program_operators(scratch / pte) for pte in ptes))
    except (FormatError, OSError):
        return []  # the program's own check reports it
    if data != expected:
        return [f"{prefix}{OPLIST_NAME}: does not list the operators and kernels of {', '.join(ptes)} "
                "(edited after packing?)"]
    return []


def _hash_stream(f: IO[bytes], copy_to: Path | None) -> str:
    out = open(copy_to, "xb") if copy_to is not None else None
    try:
        digest, _ = hash_chunks(iter(partial(f.read, _CHUNK), b""), None if out is None else out.write)
    finally:
        if out is not None:
            out.close()
    return digest


def _parse_record(data: bytes | None, prefix: str, problems: list[str]) -> dict[str, Any] | None:
    if data is None:
        return None
    from ptebuild.runtime.record import validate_record

    try:
        return validate_record(Path(f"{prefix}{RECORD_NAME}"), json.loads(data))
    except (ValueError, UnicodeDecodeError) as exc:
        problems.append(f"{prefix}{RECORD_NAME}: not valid JSON: {exc}")
    except FormatError as exc:
        problems.append(str(exc))
    return None


def _check_sums(data: bytes | None, digests: dict[str, str], prefix: str) -> list[str]:
    if data is None:
        return []
    problems = []
    listed: dict[str, str] = {}
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
        match = _SUMS_LINE.fullmatch(line)
        if match is None:
            problems.append(f"{prefix}{SUMS_NAME} line {number}: not '<sha256>  <file name>'")
            continue
        digest, name = match.groups()
        if name in listed:
            problems.append(f"{prefix}{SUMS_NAME} line {number}: {name} is listed twice")
        listed[name] = digest
        if name not in digests:
            problems.append(f"{prefix}{SUMS_NAME} line {number}: {name}: no such file in the bundle")
    for name, actual in sorted(digests.items()):
        if name == SUMS_NAME:
            continue
        if name not in listed:
            problems.append(f"{prefix}{name}: not listed in {SUMS_NAME} (a file added after packing?)")
        elif listed[name] != actual:
            problems.append(
                f"{prefix}{name}: sha256 {actual[:12]}..., {SUMS_NAME} says {listed[name][:12]}... "
                "(changed after packing)"
            )
    return problems


def _check_provenance(data: bytes | None, digests: dict[str, str], outputs: set[str], prefix: str) -> list[str]:
    if data is None:
        return []
    where = f"{prefix}{PROVENANCE_NAME}"
    try:
        statement = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        return [f"{where}: not valid JSON: {exc}"]
    subjects = subjects_of(statement)
    if isinstance(subjects, str):
        return [f"{where}: not an in-toto statement of SLSA provenance: {subjects}"]
    problems = []
    manifest = _manifest_parameter(statement)
    if manifest is not None:
        name, sha256 = manifest
        if name not in digests:
            problems.append(f"{where}: the manifest {name} is not in the bundle")
        elif digests[name] != sha256:
            problems.append(f"{where}: the manifest {name} has sha256 {sha256[:12]}..., the file has {digests[name][:12]}...")
    for name, sha256 in sorted(subjects.items()):
        if name not in digests:
            problems.append(f"{where}: subject {name} is not in the bundle")
        elif digests[name] != sha256:
            problems.append(f"{where}: subject {name} has sha256 {sha256[:12]}..., the file has {digests[name][:12]}...")
    for name in sorted(digests):
        if (name.endswith(_ARTIFACT_SUFFIXES) or name in outputs) and name not in subjects:
            problems.append(f"{prefix}{name}: not a subject of {PROVENANCE_NAME}")
    return problems


def _manifest_parameter(statement: dict[str, Any]) -> tuple[str, str] | None:
    """``(file name, sha256)`` of the manifest the statement names, if it names one."""
    try:
        manifest = statement["predicate"]["buildDefinition"]["externalParameters"]["manifest"]
        name, sha256 = manifest["path"], manifest["digest"]["sha256"]
    except (KeyError, TypeError):
        return None
    return (name, sha256) if isinstance(name, str) and isinstance(sha256, str) else None


def _check_manifest(path: Path | None, record: dict[str, Any], prefix: str) -> list[str]:
    """The bundle's manifest against its record: every program built from the entries it holds
    (:func:`~ptebuild.release.consistency.manifest_disagreements`)."""
    from ptebuild.errors import ManifestError
    from ptebuild.manifest.load import load_manifest_text
    from ptebuild.release.consistency import manifest_disagreements

    named = record.get("manifest")
    if path is None or not path.is_file():
        return [f"{prefix}{RECORD_NAME}: names the manifest {named!r}, which the bundle does not hold"]
    display = f"{prefix}{path.name}"
    try:
        plan = load_manifest_text(path.read_text(encoding="utf-8"), display)
    except UnicodeDecodeError:
        return [f"{display}: not UTF-8 text"]
    except ManifestError as exc:
        return [str(exc)]
    return [f"{display}: {line} (the bundle mixes two builds: build, lock and pack again)"
            for line in manifest_disagreements(plan, lock_entries_from_record(record["targets"]))]


def _check_lock(data: bytes, record: dict[str, Any], prefix: str) -> list[str]:
    try:
        lock = loads_lock(data.decode("utf-8"), f"{prefix}{LOCK_NAME}")
    except (FormatError, UnicodeDecodeError) as exc:
        return [str(exc)]
    return [f"{prefix}{LOCK_NAME}: {m}" for m in compare_lock(lock, lock_entries_from_record(record["targets"]))]
