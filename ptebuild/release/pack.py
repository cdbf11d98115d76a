"""Release bundles: a verified build packed into one reproducible ``.tar.gz`` or ``.zip``.

Layout: every file lies in one folder named after the archive (``robot-1.2.tar.gz`` holds
``robot-1.2/...``), so unpacking never spills files into the current folder::

    robot-1.2/
      SHA256SUMS              "<sha256>  <name>\\n" for every other file, sorted (sha256sum -c)
      policy_xnnpack.pte      every output of every target of the manifest (or the bundle) ...
      policy_xnnpack_weights.ptd
      policy_xnnpack.bpte     the program with its test cases (``bundle_io``)
      ptebuild.json           the build record of these targets (see below)
      ptebuild.lock           the lock, when there is one (a bundle's: its targets only)
      provenance.intoto.json  in-toto Statement v1, SLSA Provenance v1 (:mod:`.provenance`)
      robot.toml              the manifest
      selected_operators.yaml the operators and kernels the programs call, for a selective
                              runtime build (:mod:`ptebuild.runtime.oplist`)
      LICENSE ...             the bundle's ``include`` files, by file name

**Bundles.** A manifest may declare bundles (``[bundles.android] programs = [...]``): ``pack``
with ``bundle`` packs that one's programs (each with its ``.ptd`` and ``.bpte``, a shared
weights file too), its ``include`` files, the lock's entries of its programs, and names it in
the provenance, into ``<dist>/<its archive name>`` unless told where.

The record in a bundle is rebuilt from the targets' lock entries (kind, backend, action key,
inputs, discovered deps, outputs, and the runtimes that load each program, read anew from the
files packed), with each program's ``figures`` (what its build counted in the lowered program,
kept in the build record or the cache's action result, joined with what the packed files say:
:mod:`ptebuild.insight.program`) and ``checked`` (what its check proves), and names the manifest by its file name: what a build record
says about the machine or the folder it was built in is left out, so two builds in two folders
pack into the same bytes, and a bundle packed from the cache is byte-identical to one packed
from the output folder. Archives are written by :mod:`.archive`.

:func:`pack` packs an output folder after :func:`~ptebuild.runtime.verify.verify_folder`
(with ``verify_bytes``) passed for every target of the manifest, and only what the manifest as
it stands would build (:mod:`.consistency`: a changed ``seed`` or model file since the build
is named, nothing packed). :func:`pack_from_cache`
restores the lock's outputs from a cache's CAS into a private staging folder, verifies that
folder the same way, and packs it: nothing is built; a lock the manifest as it stands would not
make is refused the same way. Either refuses a bundle with a program over its budget (``budget``
in the manifest, judged on the figures of the files it would pack), and a bundle carries a
program's ETRecord only where the bundle or the program asks for one
(:attr:`~ptebuild.plan.BundlePlan.etrecords`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptebuild.errors import CorruptObject, ManifestError, PackError, StoreError, UsageError
from ptebuild.hashing import hash_file
from ptebuild.keyinputs import toolchain
from ptebuild.manifest.typos import did_you_mean
from ptebuild.names import case_key
from ptebuild.plan import BuildPlan, BundlePlan
from ptebuild.release.archive import (
    ArchiveResult,
    Entry,
    archive_format,
    archive_stem,
    reproducible_timestamp,
    write_archive,
)
from ptebuild.release.consistency import stale_targets
from ptebuild.release.lock import LOCK_NAME, Lock, LockEntry, compare_lock, dumps_lock, lock_entries_from_record, read_lock
from ptebuild.release.provenance import PROVENANCE_NAME, dumps_statement, provenance_statement
from ptebuild.runtime.compat import RuntimeSupport, support_of_outputs
from ptebuild.runtime.oplist import OPLIST_NAME, merge, program_operators, selected_operators_yaml
from ptebuild.runtime.record import FORMAT as RECORD_FORMAT
from ptebuild.runtime.record import RECORD_NAME, bundled_io_entry, read_build_record
from ptebuild.runtime.record import VERSION as RECORD_VERSION

if TYPE_CHECKING:
    from ptebuild.store.frontend import Cache

SUMS_NAME = "SHA256SUMS"
_RESERVED = frozenset({SUMS_NAME, RECORD_NAME, LOCK_NAME, PROVENANCE_NAME, OPLIST_NAME})
"""The names of what ptebuild writes into a bundle beside the outputs."""
_CHUNK = 1 << 20


@dataclass(frozen=True)
class PackResult:
    archive: ArchiveResult
    folder: str
    """The bundle's top folder inside the archive."""
    targets: tuple[str, ...]
    files: tuple[str, ...]
    """The files of the bundle, relative to its folder, sorted."""
    bundle: str | None = None
    """The manifest's bundle packed (None: the whole manifest)."""
    operators: tuple[str, ...] = ()
    """The operators its ``selected_operators.yaml`` lists."""

    def to_json(self) -> dict[str, Any]:
        return {
            "archive": str(self.archive.path),
            "format": self.archive.format,
            "sha256": self.archive.sha256,
            "bytes": self.archive.size,
            "folder": self.folder,
            "bundle": self.bundle,
            "targets": list(self.targets),
            "files": list(self.files),
            "operators": list(self.operators),
        }


def pack(
    out_dir: str | os.PathLike[str] | None,
    manifest_path: str | Path,
    lock_path: str | Path | None,
    dest: str | os.PathLike[str] | None,
    bundle: str | None = None,
) -> PackResult:
    """Pack the targets of ``manifest_path`` built into ``out_dir`` (None: the manifest's), or
    those of its bundle ``bundle``, into ``dest`` (None, for a bundle: ``<dist>/<its archive>``).

    Raises:
        UsageError: bad archive name, no build record, unreadable manifest or lock, no such bundle.
        ManifestError: the manifest is invalid, or an ``include`` glob matches nothing.
        PackError: a target was not built, fails verification, or differs from the lock;
            nothing is written then.
    """
    from ptebuild.manifest import load_manifest
    from ptebuild.runtime.verify import verify_folder

    manifest_path = Path(manifest_path)
    plan = load_manifest(manifest_path)
    chosen = _bundle_of(plan, bundle)
    dest = _destination(plan, chosen, dest)
    archive_format(dest)
    folder = Path(out_dir) if out_dir is not None else plan.out_dir()
    record = read_build_record(folder) if folder.is_dir() else None
    if record is None:
        raise UsageError(f"{folder}: no {RECORD_NAME}; build the manifest first: `ptebuild build {manifest_path}`")
    wanted = list(chosen.programs) if chosen else [p.name for p in plan.programs] + [s.name for s in plan.shims]
    unbuilt = [name for name in wanted if name not in record.targets]
    if unbuilt:
        raise PackError(
            f"{folder}: not built: {', '.join(unbuilt)}; nothing packed; run `ptebuild build {manifest_path}`"
        )
    report = verify_folder(folder, verify_bytes=True)
    failed = [t for t in report.failed if t.name in wanted]
    if failed:
        first = failed[0]
        more = f" (and {len(failed) - 1} more targets)" if len(failed) > 1 else ""
        raise PackError(
            f"{folder}: {first.name} fails verification: {first.problems[0]}{more}; nothing packed; "
            f"rebuild it with `ptebuild build {manifest_path}`"
        )
    targets = {name: record.targets[name] for name in sorted(wanted)}
    lock = read_lock(lock_path) if lock_path is not None else None
    _refuse_stale(plan, manifest_path, folder, lock_entries_from_record(targets), lock)
    if lock is not None:
        mismatches = compare_lock(lock, lock_entries_from_record(targets), subset=chosen is not None)
        if mismatches:
            more = f" (and {len(mismatches) - 1} more)" if len(mismatches) > 1 else ""
            fix = mismatches[0].fix(manifest_path)
            raise PackError(f"{lock.path}: {mismatches[0]}{more}; nothing packed" + (f"; {fix}" if fix else ""))
    targets = _carried(targets, chosen)
    files = {file: folder / file for entry in targets.values() for file in entry["outputs"]}
    measured = {name: (entry.get("checked") or {}).get("max_abs_error") for name, entry in targets.items()}
    counted = {name: (entry.get("insight"), entry.get("checked")) for name, entry in targets.items()}
    return _write_bundle(dest, files, targets, manifest_path, _lock_bytes(lock, wanted, chosen), chosen,
                         _included(plan, chosen, files), bpte_tolerances(plan, measured), plan, counted)


def pack_from_cache(
    lock: Lock | str | Path,
    cache: Cache | str | os.PathLike[str],
    dest: str | os.PathLike[str] | None,
    manifest_path: str | Path | None = None,
    bundle: str | None = None,
) -> PackResult:
    """Pack the outputs the lock names (those of the manifest's bundle ``bundle`` only, when
    given), restored by digest from ``cache``: a :class:`~ptebuild.store.frontend.Cache` (the
    local folder, and a remote one if it has it) or a local cache folder.

    ``manifest_path`` defaults to the lock's ``manifest``, beside the lock; ``dest`` (None, for a
    bundle) to ``<dist>/<the bundle's archive>``.

    Raises:
        PackError: programs are missing from the cache (all of them named) or corrupt there,
            or the restored files fail verification; nothing is written then.
        UsageError / FormatError: unreadable lock or manifest, bad archive name, no such bundle
            or a bundle's program the lock lacks.
    """
    from ptebuild.runtime.verify import verify_folder

    if not isinstance(lock, Lock):
        lock = read_lock(lock)
    manifest_path = Path(manifest_path) if manifest_path is not None else _lock_manifest(lock)
    from ptebuild.manifest import load_manifest

    # The plan: the bundle, where it goes, and the .bpte tolerances (the same bundle as `pack`'s).
    plan = load_manifest(manifest_path)
    chosen = _bundle_of(plan, bundle)
    dest = _destination(plan, chosen, dest)
    archive_format(dest)
    if not lock.entries:
        raise PackError(f"{lock.path}: the lock names no targets; nothing packed; write it with `ptebuild lock MANIFEST`")
    entries = dict(lock.entries)
    if chosen is not None:
        absent = [name for name in chosen.programs if name not in entries]
        if absent:
            raise UsageError(
                f"{lock.path}: no entry for {', '.join(absent)} of bundle {chosen.name!r} "
                f"; the lock is stale: run `ptebuild lock {manifest_path}`"
            )
        entries = {name: entries[name] for name in chosen.programs}
    stale = stale_targets(plan, entries, hash_file)
    if stale:
        more = f" (and {len(stale) - 1} more targets)" if len(stale) > 1 else ""
        raise PackError(
            f"{lock.path}: lock is stale: {stale[0].line()}{more}; nothing packed; build and lock it "
            f"(`ptebuild build {manifest_path}`, `ptebuild lock {manifest_path}`), then pack"
        )
    unlisted = [name for name, entry in entries.items() if not entry.outputs]
    if unlisted:
        raise PackError(f"{lock.path}: no outputs listed for {', '.join(unlisted)} ({LOCK_NAME} is incomplete); nothing packed; "
                        "write it again with `ptebuild lock MANIFEST`")
    if isinstance(cache, (str, os.PathLike)):
        from ptebuild.store.frontend import Cache

        cache = Cache.for_folder(cache)
    where = str(cache.local_root) if cache.local_root is not None else ", ".join(t.name for t in cache.tiers)
    outputs = [o for e in entries.values() for o in e.outputs or ()]
    absent_digests = set(cache.missing_blobs([o.sha256 for o in outputs], {o.sha256: o.size for o in outputs}))
    missing = []
    for name, entry in sorted(entries.items()):
        absent = [o.name for o in entry.outputs or () if o.sha256 in absent_digests]
        if absent:
            missing.append(f"{name} ({', '.join(absent)})")
    if missing:
        raise PackError(
            f"{where}: not in the cache: {'; '.join(missing)}; nothing packed; build them there or pack from a cache "
            "that has them"
        )
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{dest}: cannot write there: {exc.strerror}") from None
    with tempfile.TemporaryDirectory(prefix=".ptebuild-pack-", dir=dest.parent) as staging:
        folder = Path(staging)
        for name, entry in sorted(entries.items()):
            for output in entry.outputs or ():
                if (folder / output.name).exists():
                    continue  # a weights file two programs share, restored once
                try:
                    cache.fetch_blob(output.sha256, folder / output.name, output.size)
                except CorruptObject as exc:
                    raise PackError(f"{where}: {name}: {exc.message}; nothing packed; build it again into that cache") from None
                except StoreError as exc:
                    raise PackError(f"{name}: {exc.message}; nothing packed; check the cache folder (`ptebuild cache verify`)") from None
        tolerances = bpte_tolerances(plan, {name: _measured_error(cache, entry.key) for name, entry in entries.items()})
        targets = _record_targets(entries, manifest_path.name, tolerances)
        record = {"format": RECORD_FORMAT, "version": RECORD_VERSION, "manifest": manifest_path.name, "targets": targets}
        (folder / RECORD_NAME).write_text(json.dumps(record, sort_keys=True, indent=1) + "\n", encoding="utf-8")
        report = verify_folder(folder, verify_bytes=True)
        if not report.ok:
            first = report.failed[0]
            raise PackError(f"{where}: {first.name} restored from the cache fails verification: {first.problems[0]}; nothing packed; "
                            "build it again into that cache")
        targets = _carried(targets, chosen)
        files = {file: folder / file for entry in targets.values() for file in entry["outputs"]}
        extras = _included(plan, chosen, files)
        counted = {name: _counted(cache, entry) for name, entry in entries.items() if entry.kind == "program"}
        return _write_bundle(dest, files, targets, manifest_path, _lock_bytes(lock, list(entries), chosen), chosen, extras,
                             tolerances, plan, counted)


def _refuse_stale(plan: BuildPlan, manifest_path: Path, folder: Path, built: Mapping[str, LockEntry], lock: Lock | None) -> None:
    """PackError if the manifest as it stands would not produce what ``folder`` holds (its record's
    ``built`` entries): the bundle would carry a manifest that does not make its programs."""
    stale = stale_targets(plan, built, hash_file)
    if not stale:
        return
    first = stale[0]
    more = f" (and {len(stale) - 1} more targets)" if len(stale) > 1 else ""
    way_out = f"build it first (`ptebuild build {manifest_path}`)"
    if lock is not None and all(name in lock.entries for name in built) and not stale_targets(
        plan, {name: lock.entries[name] for name in built}, hash_file
    ):
        way_out += f", or pack what {lock.path.name if lock.path else LOCK_NAME} names from the cache (`ptebuild pack {manifest_path} --from-cache`)"
    raise PackError(f"{folder}: {first.line()}{more}; nothing packed; {way_out}")


def _bundle_of(plan: BuildPlan, name: str | None) -> BundlePlan | None:
    """The plan's bundle called ``name`` (None for None); UsageError naming the choices otherwise."""
    if name is None:
        return None
    found = plan.bundle(name)
    if found is None:
        names = [b.name for b in plan.bundles]
        declared = f"; name one of {', '.join(names)}" if names else "; declare it as [bundles.NAME] programs = [...]"
        raise UsageError(f"--bundle: {plan.manifest} has no bundle {name!r}{did_you_mean(name, names)}{declared}")
    return found


def _destination(plan: BuildPlan | None, bundle: BundlePlan | None, dest: str | os.PathLike[str] | None) -> Path:
    if dest is not None:
        return Path(dest)
    if plan is None or bundle is None:
        raise UsageError("pack: give the archive to write (-o NAME.tar.gz)")
    return plan.dist_dir() / bundle.archive


def _lock_bytes(lock: Lock | None, wanted: list[str], bundle: BundlePlan | None) -> bytes | None:
    """The lock a bundle carries: the file as it is for the whole manifest; a bundle's targets only
    (without the ETRecords it does not carry)."""
    if lock is None:
        return None
    if bundle is None and lock.path is not None:
        try:
            return lock.path.read_bytes()
        except OSError as exc:
            raise UsageError(f"{exc.filename}: cannot read: {exc.strerror}; give a lock you can read (--lock)") from None
    subset = {name: lock.entries[name] for name in sorted(wanted) if name in lock.entries}
    if bundle is not None:
        subset = {name: replace(entry, outputs=tuple(o for o in entry.outputs if _carries(bundle, o.name)))
                  if entry.outputs is not None else entry for name, entry in subset.items()}
    return dumps_lock(Lock(subset, lock.manifest)).encode("utf-8")


def _carries(bundle: BundlePlan | None, name: str) -> bool:
    """Whether a bundle packs an output of one of its programs: all but the ETRecords it does not ask for."""
    return bundle is None or not name.endswith(".etrecord") or name in bundle.etrecords


def _carried(targets: Mapping[str, dict[str, Any]], bundle: BundlePlan | None) -> dict[str, dict[str, Any]]:
    """The record targets with the outputs the bundle carries."""
    return {name: {**entry, "outputs": {f: info for f, info in entry["outputs"].items() if _carries(bundle, f)}}
            for name, entry in targets.items()}


Counted = tuple[Any, Any]
"""A program's figures as its build counted them (``ProgramInsight`` JSON, or None) and what its
check proves (``CheckSummary.to_json()``, the record's ``checked``, or None)."""


def _counted(cache: Cache, entry: LockEntry) -> Counted:
    """What the cache's action result for the entry's key says it counted, without its blobs."""
    try:
        hit = cache.lookup(entry.key, fetch=False).hit
    except StoreError:
        hit = None
    if hit is None:
        return None, None
    from ptebuild.figures import CheckSummary

    summary = CheckSummary.of(hit.result.figures)
    insight = hit.result.insight
    return insight.to_json() if insight is not None else None, summary.to_json() if summary is not None else None


def _bundle_figures(targets: Mapping[str, dict[str, Any]], files: Mapping[str, Path],
                    counted: Mapping[str, Counted]) -> dict[str, Any]:
    """Each program's figures as the bundle's record keeps them: what its build counted (the
    worker's half) joined with what the packed files say, a ``.ptd`` shared with the bundle's
    other programs that load it."""
    from ptebuild.insight.program import ProgramInsight
    from ptebuild.insight.sizes import WeightsFile
    from ptebuild.runtime.pte_insight import planned_buffers, pte_split

    users: dict[str, list[str]] = {}
    for name, entry in targets.items():
        for file in entry["outputs"]:
            if file.endswith(".ptd"):
                users.setdefault(file, []).append(name)
    found = {}
    for name, entry in targets.items():
        if entry.get("kind", "program") != "program":
            continue
        worker, _checked = counted.get(name, (None, None))
        try:
            base = ProgramInsight.from_json(worker).worker_part()
        except (KeyError, TypeError, ValueError):
            base = ProgramInsight()
        pte = next((f for f in entry["outputs"] if f.endswith(".pte")), None)
        if pte is None:
            continue
        weights = [WeightsFile(f, int(info["bytes"]), tuple(sorted(u for u in users[f] if u != name)))
                   for f, info in sorted(entry["outputs"].items()) if f.endswith(".ptd")]
        found[name] = base.with_files(pte_split(files[pte]).with_weights(weights), planned_buffers(files[pte]))
    return found


def _over_budget(plan: BuildPlan | None, figures: Mapping[str, Any]) -> None:
    """PackError, located at the first limit broken, for a program over its budget."""
    if plan is None:
        return
    from ptebuild.insight.budget import judge

    for program in plan.programs:
        if program.budget is None or program.name not in figures:
            continue
        overruns = judge(figures[program.name], program.budget, program.pte_name)
        if overruns:
            first = overruns[0]
            more = f" (and {len(overruns) - 1} more limits)" if len(overruns) > 1 else ""
            raise PackError(f"{plan.manifest}: {first.limit.location}: {first.message}{more}; nothing packed; "
                             "bring the program within its budget or raise the budget, then build and pack again")


def _included(plan: BuildPlan | None, bundle: BundlePlan | None, outputs: Mapping[str, Path]) -> dict[str, Path]:
    """A bundle's ``include`` files by the name they are packed under (their file name).

    Raises ManifestError, located at the glob, for one that matches no file, a file outside the
    manifest's folder, or two files (or a file and an output) that would be one name.
    """
    if plan is None or bundle is None:
        return {}
    root = Path(plan.manifest_dir).resolve()
    taken = {case_key(name): f"the output {name}" for name in outputs}
    taken.update({case_key(name): f"ptebuild's {name}" for name in _RESERVED})
    taken[case_key(Path(plan.manifest).name)] = "the manifest"
    found: dict[str, Path] = {}
    for index, pattern in enumerate(bundle.include):
        where = f"{plan.manifest}: bundles.{bundle.name}.include[{index}]"
        matches = sorted(p for p in root.glob(pattern) if p.is_file())
        if not matches:
            raise ManifestError(f"{where}: {pattern!r} matches no file in {root}; give globs of files beside the manifest")
        for path in matches:
            if not path.resolve().is_relative_to(root):
                raise ManifestError(f"{where}: {path} lies outside the manifest's folder (a link?); give files inside it")
            key = case_key(path.name)
            if found.get(path.name) == path:
                continue
            if key in taken:
                raise ManifestError(
                    f"{where}: {path.relative_to(root).as_posix()} would be packed as {path.name!r}, "
                    f"the name of {taken[key]} (in case or exactly); rename it"
                )
            taken[key] = f"the included {path.relative_to(root).as_posix()}"
            found[path.name] = path
    return found


def _lock_manifest(lock: Lock) -> Path:
    if not lock.manifest or lock.path is None:
        raise UsageError(f"{lock.path or LOCK_NAME}: the lock does not name its manifest (give the manifest)")
    path = lock.path.parent / lock.manifest
    if not path.is_file():
        raise UsageError(f"{lock.path}: manifest: {path} does not exist (give the manifest)")
    return path


def bpte_tolerances(plan: BuildPlan | None, measured: Mapping[str, float | None] | None = None) -> dict[str, dict[str, float]]:
    """Program -> its ``bundled_io`` (:func:`~ptebuild.runtime.record.bundled_io_entry`), for each
    program that writes a ``.bpte``: what a device passes ExecuTorch's ``verify_method_outputs``,
    derived from the largest error its check measured (``measured``: program -> that error, from
    the build record or the cache's result; absent: the ``atol`` the check held it to), as the
    ``.bpte``'s expected outputs are those of the model the check compared with."""
    if plan is None:
        return {}
    measured = measured or {}
    return {program.name: bundled_io_entry(program.atol, measured.get(program.name))
            for program in plan.programs if program.bpte_name}


def _measured_error(cache: Any, key: str) -> float | None:
    """The largest error the check of the cached result under ``key`` measured, if the cache has it."""
    from ptebuild.figures import CheckSummary

    try:
        hit = cache.lookup(key, fetch=False).hit
    except Exception:  # a cache that cannot answer: the check's atol stands
        return None
    summary = CheckSummary.of(hit.result.figures) if hit is not None else None
    return summary.max_abs_error if summary is not None else None


def _record_targets(entries: Mapping[str, LockEntry], manifest_name: str,
                    tolerances: Mapping[str, dict[str, float]] | None = None) -> dict[str, dict[str, Any]]:
    """Record entries (``ptebuild.json`` shape) for lock entries; ``tolerances``: those of
    :func:`bpte_tolerances`, kept for the programs whose ``.bpte`` is among their outputs."""
    tolerances = tolerances or {}
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
        if entry.runtime is not None:
            target["runtime"] = entry.runtime.to_json()
        if name in tolerances and any(o.name.endswith(".bpte") for o in entry.outputs or ()):
            target["bundled_io"] = dict(tolerances[name])
        targets[name] = target
    return targets


def _write_bundle(
    dest: Path,
    files: Mapping[str, Path],
    targets: Mapping[str, dict[str, Any]],
    manifest_path: Path,
    lock_bytes: bytes | None,
    bundle: BundlePlan | None = None,
    extras: Mapping[str, Path] | None = None,
    tolerances: Mapping[str, dict[str, float]] | None = None,
    plan: BuildPlan | None = None,
    counted: Mapping[str, Counted] | None = None,
) -> PackResult:
    extras = dict(extras or {})
    counted = counted or {}
    figures = _bundle_figures(targets, files, counted)
    _over_budget(plan, figures)
    manifest_name = manifest_path.name
    try:
        manifest_bytes = manifest_path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{exc.filename}: cannot read: {exc.strerror}; give files you can read") from None
    if manifest_name in _RESERVED or manifest_name in files:
        raise UsageError(f"{manifest_path}: a manifest named {manifest_name!r} collides with a file of the bundle (rename it)")
    # What the files say about the runtimes that load them, read now: a lock or record that
    # predates it (or another ptebuild's) cannot make two packs of the same files differ.
    entries = {
        name: replace(entry, runtime=_runtime_of(entry, files)) if entry.kind == "program" else entry
        for name, entry in lock_entries_from_record(targets).items()
    }
    ptes = sorted(o.name for entry in entries.values() if entry.kind == "program"
                  for o in entry.outputs or () if o.name.endswith(".pte"))
    operators = merge(program_operators(files[pte]) for pte in ptes)
    record_targets = _record_targets(entries, manifest_name, tolerances)
    for name, found in figures.items():
        record_targets[name]["insight"] = found.to_json()
        checked = counted.get(name, (None, None))[1]
        if isinstance(checked, dict):
            record_targets[name]["checked"] = dict(checked)
    record = {
        "format": RECORD_FORMAT,
        "version": RECORD_VERSION,
        "manifest": manifest_name,
        "targets": record_targets,
    }
    in_memory = {
        RECORD_NAME: (json.dumps(record, sort_keys=True, indent=1) + "\n").encode("utf-8"),
        manifest_name: manifest_bytes,
    }
    if ptes:
        in_memory[OPLIST_NAME] = selected_operators_yaml(operators)
    if lock_bytes is not None:
        in_memory[LOCK_NAME] = lock_bytes
    # A weights file shared by several programs is one subject (and one file).
    subjects = {file: info["sha256"] for entry in targets.values() for file, info in entry["outputs"].items()}
    for name, path in extras.items():
        subjects[name] = hash_file(path)[0]
    if OPLIST_NAME in in_memory:
        subjects[OPLIST_NAME] = hashlib.sha256(in_memory[OPLIST_NAME]).hexdigest()
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    stamp = reproducible_timestamp()
    statement = provenance_statement(
        sorted(subjects.items()),
        manifest_name,
        hashlib.sha256(manifest_bytes).hexdigest(),
        entries,
        source_date_epoch=stamp if epoch else None,
        bundle=bundle.name if bundle is not None else None,
    )
    in_memory[PROVENANCE_NAME] = dumps_statement(statement)
    sums = {name: hashlib.sha256(data).hexdigest() for name, data in in_memory.items()}
    sums.update(subjects)
    in_memory[SUMS_NAME] = "".join(f"{sums[name]}  {name}\n" for name in sorted(sums)).encode("utf-8")
    folder = archive_stem(dest)
    on_disk = {**files, **extras}
    archive_entries = [Entry(f"{folder}/{name}", data=data) for name, data in in_memory.items()]
    archive_entries += [Entry(f"{folder}/{name}", source=path) for name, path in on_disk.items()]
    result = write_archive(dest, archive_entries, folders=[folder], timestamp=stamp)
    return PackResult(
        archive=result,
        folder=folder,
        targets=tuple(sorted(targets)),
        files=tuple(sorted([*in_memory, *on_disk])),
        bundle=bundle.name if bundle is not None else None,
        operators=operators.operators,
    )


def _runtime_of(entry: LockEntry, files: Mapping[str, Path]) -> RuntimeSupport | None:
    outputs = [o.name for o in entry.outputs or ()]
    pte = next((files[n] for n in outputs if n.endswith(".pte") and n in files), None)
    if pte is None:
        return None
    return support_of_outputs(pte.parent, outputs, entry.inputs.get(toolchain("executorch")))
