"""Release bundles: a verified build packed into one reproducible ``.tar.gz`` or ``.zip``.

Layout: every file lies in one folder named after the archive (``robot-1.2.tar.gz`` holds
``robot-1.2/...``), so unpacking never spills files into the current folder::

    robot-1.2/
      SHA256SUMS              "<sha256>  <name>\\n" for every other file, sorted (sha256sum -c)
      policy_xnnpack.pte      every output of every target of the manifest ...
      policy_xnnpack_weights.ptd
      ptebuild.json           the build record of these targets (see below)
      ptebuild.lock           the lock, when there is one
      provenance.intoto.json  in-toto Statement v1, SLSA Provenance v1 (:mod:`.provenance`)
      robot.toml              the manifest

The record in a bundle is rebuilt from the targets' lock entries (kind, backend, action key,
inputs, discovered deps, outputs) and names the manifest by its file name: what a build record
says about the machine or the folder it was built in is left out, so two builds in two folders
pack into the same bytes, and a bundle packed from the cache is byte-identical to one packed
from the output folder. Archives are written by :mod:`.archive`.

:func:`pack` packs an output folder after :func:`~ptebuild.runtime.verify.verify_folder`
(with ``verify_bytes``) passed for every target of the manifest. :func:`pack_from_cache`
restores the lock's outputs from a cache's CAS into a private staging folder, verifies that
folder the same way, and packs it: nothing is built.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptebuild.errors import CorruptObject, PackError, StoreError, UsageError
from ptebuild.release.archive import (
    ArchiveResult,
    Entry,
    archive_format,
    archive_stem,
    reproducible_timestamp,
    write_archive,
)
from ptebuild.release.lock import LOCK_NAME, Lock, LockEntry, compare_lock, lock_entries_from_record, read_lock
from ptebuild.release.provenance import PROVENANCE_NAME, dumps_statement, provenance_statement
from ptebuild.runtime.record import FORMAT as RECORD_FORMAT
from ptebuild.runtime.record import RECORD_NAME, read_build_record
from ptebuild.runtime.record import VERSION as RECORD_VERSION

SUMS_NAME = "SHA256SUMS"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class PackResult:
    archive: ArchiveResult
    folder: str
    """The bundle's top folder inside the archive."""
    targets: tuple[str, ...]
    files: tuple[str, ...]
    """The files of the bundle, relative to its folder, sorted."""

    def to_json(self) -> dict[str, Any]:
        return {
            "archive": str(self.archive.path),
            "format": self.archive.format,
            "sha256": self.archive.sha256,
            "bytes": self.archive.size,
            "folder": self.folder,
            "targets": list(self.targets),
            "files": list(self.files),
        }


def pack(
    out_dir: str | Path | None,
    manifest_path: str | Path,
    lock_path: str | Path | None,
    dest: str | Path,
) -> PackResult:
    """Pack the targets of ``manifest_path`` built into ``out_dir`` (None: the manifest's).

    Raises:
        UsageError: bad archive name, no build record, unreadable manifest or lock.
        ManifestError: the manifest is invalid.
        PackError: a target was not built, fails verification, or differs from the lock;
            nothing is written then.
    """
    from ptebuild.manifest import load_manifest
    from ptebuild.runtime.verify import verify_folder

    dest = Path(dest)
    archive_format(dest)
    manifest_path = Path(manifest_path)
    plan = load_manifest(manifest_path)
    folder = Path(out_dir) if out_dir is not None else plan.out_dir()
    record = read_build_record(folder) if folder.is_dir() else None
    if record is None:
        raise UsageError(f"{folder}: no {RECORD_NAME} (build the manifest first: `ptebuild build {manifest_path}`)")
    wanted = [p.name for p in plan.programs] + [s.name for s in plan.shims]
    unbuilt = [name for name in wanted if name not in record.targets]
    if unbuilt:
        raise PackError(
            f"{folder}: not built: {', '.join(unbuilt)} (run `ptebuild build {manifest_path}`); nothing packed"
        )
    report = verify_folder(folder, verify_bytes=True)
    failed = [t for t in report.failed if t.name in wanted]
    if failed:
        first = failed[0]
        more = f" (and {len(failed) - 1} more targets)" if len(failed) > 1 else ""
        raise PackError(
            f"{folder}: {first.name} fails verification: {first.problems[0]}{more}; "
            f"rebuild it with `ptebuild build {manifest_path}`; nothing packed"
        )
    targets = {name: record.targets[name] for name in sorted(wanted)}
    lock = read_lock(lock_path) if lock_path is not None else None
    if lock is not None:
        mismatches = compare_lock(lock, lock_entries_from_record(targets))
        if mismatches:
            more = f" (and {len(mismatches) - 1} more)" if len(mismatches) > 1 else ""
            raise PackError(f"{lock.path}: {mismatches[0]}{more}; nothing packed")
    files = {file: folder / file for entry in targets.values() for file in entry["outputs"]}
    return _write_bundle(dest, files, targets, manifest_path, lock)


def pack_from_cache(
    lock: Lock | str | Path,
    cache,
    dest: str | Path,
    manifest_path: str | Path | None = None,
) -> PackResult:
    """Pack the outputs the lock names, restored by digest from ``cache``: a
    :class:`~ptebuild.store.frontend.Cache` (the local folder, and a remote one if it has it) or a
    local cache folder.

    ``manifest_path`` defaults to the lock's ``manifest``, beside the lock.

    Raises:
        PackError: programs are missing from the cache (all of them named) or corrupt there,
            or the restored files fail verification; nothing is written then.
        UsageError / FormatError: unreadable lock or manifest, bad archive name.
    """
    from ptebuild.runtime.verify import verify_folder

    dest = Path(dest)
    archive_format(dest)
    if not isinstance(lock, Lock):
        lock = read_lock(lock)
    manifest_path = Path(manifest_path) if manifest_path is not None else _lock_manifest(lock)
    if not lock.entries:
        raise PackError(f"{lock.path}: the lock names no targets; nothing packed")
    unlisted = [name for name, entry in lock.entries.items() if not entry.outputs]
    if unlisted:
        raise PackError(f"{lock.path}: no outputs listed for {', '.join(unlisted)} ({LOCK_NAME} is incomplete); nothing packed")
    if isinstance(cache, (str, os.PathLike)):
        from ptebuild.store.frontend import Cache

        cache = Cache.for_folder(cache)
    where = str(cache.local_root) if cache.local_root is not None else ", ".join(t.name for t in cache.tiers)
    absent_digests = set(cache.missing_blobs([o.sha256 for e in lock.entries.values() for o in e.outputs or ()]))
    missing = []
    for name, entry in sorted(lock.entries.items()):
        absent = [o.name for o in entry.outputs or () if o.sha256 in absent_digests]
        if absent:
            missing.append(f"{name} ({', '.join(absent)})")
    if missing:
        raise PackError(
            f"{where}: not in the cache: {'; '.join(missing)}; build them there or pack from a cache "
            "that has them; nothing packed"
        )
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{dest}: cannot write there: {exc.strerror}") from None
    with tempfile.TemporaryDirectory(prefix=".ptebuild-pack-", dir=dest.parent) as staging:
        folder = Path(staging)
        for name, entry in sorted(lock.entries.items()):
            for output in entry.outputs or ():
                try:
                    cache.fetch_blob(output.sha256, folder / output.name)
                except CorruptObject as exc:
                    raise PackError(f"{where}: {name}: {exc}; nothing packed") from None
                except StoreError as exc:
                    raise PackError(f"{name}: {exc}; nothing packed") from None
        targets = _record_targets(lock.entries, manifest_path.name)
        record = {"format": RECORD_FORMAT, "version": RECORD_VERSION, "manifest": manifest_path.name, "targets": targets}
        (folder / RECORD_NAME).write_text(json.dumps(record, sort_keys=True, indent=1) + "\n", encoding="utf-8")
        report = verify_folder(folder, verify_bytes=True)
        if not report.ok:
            first = report.failed[0]
            raise PackError(f"{where}: {first.name} restored from the cache fails verification: {first.problems[0]}; nothing packed")
        files = {file: folder / file for entry in targets.values() for file in entry["outputs"]}
        return _write_bundle(dest, files, targets, manifest_path, lock)


def _lock_manifest(lock: Lock) -> Path:
    if not lock.manifest or lock.path is None:
        raise UsageError(f"{lock.path or LOCK_NAME}: the lock does not name its manifest (give the manifest)")
    path = lock.path.parent / lock.manifest
    if not path.is_file():
        raise UsageError(f"{lock.path}: manifest: {path} does not exist (give the manifest)")
    return path


def _record_targets(entries: Mapping[str, LockEntry], manifest_name: str) -> dict[str, dict]:
    """Record entries (``ptebuild.json`` shape) for lock entries."""
    targets = {}
    for name, entry in sorted(entries.items()):
        target: dict[str, Any] = {
            "kind": entry.kind,
            "key": entry.key,
            "manifest": manifest_name,
            "inputs": dict(entry.inputs),
            "outputs": {o.name: {"sha256": o.sha256, "bytes": o.size} for o in entry.outputs or ()},
        }
        if entry.backend:
            target["backend"] = entry.backend
        if entry.deps is not None:
            target["deps"] = entry.deps.to_json()
        targets[name] = target
    return targets


def _write_bundle(
    dest: Path,
    files: Mapping[str, Path],
    targets: Mapping[str, dict],
    manifest_path: Path,
    lock: Lock | None,
) -> PackResult:
    manifest_name = manifest_path.name
    try:
        manifest_bytes = manifest_path.read_bytes()
        lock_bytes = lock.path.read_bytes() if lock is not None and lock.path is not None else None
    except OSError as exc:
        raise UsageError(f"{exc.filename}: cannot read: {exc.strerror}") from None
    reserved = {SUMS_NAME, RECORD_NAME, LOCK_NAME, PROVENANCE_NAME}
    if manifest_name in reserved or manifest_name in files:
        raise UsageError(f"{manifest_path}: a manifest named {manifest_name!r} collides with a file of the bundle (rename it)")
    entries = lock_entries_from_record(targets)
    # A weights file shared by several programs is one subject (and one file).
    subjects = sorted({(file, info["sha256"]) for entry in targets.values() for file, info in entry["outputs"].items()})
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    stamp = reproducible_timestamp()
    statement = provenance_statement(
        subjects,
        manifest_name,
        hashlib.sha256(manifest_bytes).hexdigest(),
        entries,
        source_date_epoch=stamp if epoch else None,
    )
    record = {
        "format": RECORD_FORMAT,
        "version": RECORD_VERSION,
        "manifest": manifest_name,
        "targets": _record_targets(entries, manifest_name),
    }
    in_memory = {
        RECORD_NAME: (json.dumps(record, sort_keys=True, indent=1) + "\n").encode("utf-8"),
        PROVENANCE_NAME: dumps_statement(statement),
        manifest_name: manifest_bytes,
    }
    if lock_bytes is not None:
        in_memory[LOCK_NAME] = lock_bytes
    sums = {name: hashlib.sha256(data).hexdigest() for name, data in in_memory.items()}
    sums.update(dict(subjects))
    in_memory[SUMS_NAME] = "".join(f"{sums[name]}  {name}\n" for name in sorted(sums)).encode("utf-8")
    folder = archive_stem(dest)
    archive_entries = [Entry(f"{folder}/{name}", data=data) for name, data in in_memory.items()]
    archive_entries += [Entry(f"{folder}/{name}", source=path) for name, path in files.items()]
    result = write_archive(dest, archive_entries, folders=[folder], timestamp=stamp)
    return PackResult(
        archive=result,
        folder=folder,
        targets=tuple(sorted(targets)),
        files=tuple(sorted([*in_memory, *files])),
    )
