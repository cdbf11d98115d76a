"""What changed between two releases: ``ptebuild diff OLD.tar.gz NEW.tar.gz`` (or two output
folders, ``ptebuild diff OLD_OUT NEW_OUT``), program by program.

Both bundles are read without unpacking (:func:`~ptebuild.release.bundle.bundle_files`, the
safety checks of ``verify``): each file is streamed once through SHA-256, and only the ``.pte``
files of programs whose bytes differ are copied, into a private temporary folder, to be
compared part by part. Each program of either bundle's build record is one of:

- **same**: every file of it has the same bytes;
- **new weights only**: its ``.ptd`` files differ and its ``.pte`` is byte-identical (a weights
  file it shares with a program whose weights moved): the new ``.ptd`` alone updates a device;
- **new program and weights**: its ``.pte`` differs only in its weight keys and the weights it
  holds itself (:func:`~ptebuild.runtime.diff.weights_only`). ptebuild keys weights by their
  SHA-256, so new weights always change the ``.pte`` that names them: a device needs both files
  (a new ``.ptd`` beside the old ``.pte`` fails at load);
- **changed**: its ``.pte`` differs otherwise (the most telling part that differs is named), or its
  test cases (``.bpte``) alone;
- **added** / **removed**: in one bundle only.

Each program that changed names what a device must replace (``ship``: its files whose bytes
differ, the new release's names) and why.

Sizes are the sum of a program's files (a weights file that programs share counts for each).
Each program in both also gets the change of its figures (:mod:`ptebuild.insight.compare`): its
``.pte`` and ``.ptd`` bytes, its delegated fraction and planned memory (the ``insight`` its build
record keeps), and its check's worst error and lowest cosine (its ``checked`` summary); a release whose
record predates them has its files' sizes only. Two output folders are compared the same way,
from their build records (``ptebuild.json``) and the files they name, read in place.
Beside the programs: the operators the bundles' ``selected_operators.yaml`` add or drop, and
the other files (manifest, lock, included files) whose bytes differ. Imports neither torch nor
executorch.
"""

from __future__ import annotations

import enum
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from ptebuild.errors import FormatError, UsageError
from ptebuild.hashing import hash_chunks, hash_file
from ptebuild.insight.compare import FiguresChange, ReleaseFigures
from ptebuild.release.bundle import bundle_files
from ptebuild.release.pack import SUMS_NAME
from ptebuild.runtime.diff import Part
from ptebuild.runtime.oplist import OPLIST_NAME
from ptebuild.runtime.record import RECORD_NAME

_CHUNK = 1 << 20
_METADATA_LIMIT = 16 << 20
_SKIPPED = frozenset({SUMS_NAME, RECORD_NAME, "provenance.intoto.json"})
"""Files that differ whenever anything does: not reported on their own."""
_TELLING = (Part.METHOD, Part.PLAN, Part.DELEGATE, Part.VERSION, Part.NEEDS, Part.DATA_KEY, Part.CONSTANTS, Part.SEGMENT,
            Part.HEADER, Part.BYTES)
"""The parts of a changed ``.pte``, the most telling first (a changed method explains its sizes)."""


class Change(str, enum.Enum):
    SAME = "same"
    WEIGHTS = "new-weights"
    """Only weights files differ; the ``.pte`` is byte-identical."""
    PROGRAM_AND_WEIGHTS = "program-and-weights"
    """The same plan with other weights: the ``.pte`` differs in its weight keys (and the weights it holds)."""
    CHANGED = "changed"
    ADDED = "added"
    REMOVED = "removed"

    def __str__(self) -> str:
        return self.value

    @property
    def words(self) -> str:
        return _WORDS[self]


_WORDS = {
    Change.SAME: "same bytes",
    Change.WEIGHTS: "new weights only",
    Change.PROGRAM_AND_WEIGHTS: "new program and weights",
    Change.CHANGED: "changed",
    Change.ADDED: "new program",
    Change.REMOVED: "removed",
}


@dataclass(frozen=True)
class ProgramChange:
    """One program of either bundle: what changed, its files' sizes before and after (None: absent)."""

    name: str
    change: Change
    before: Mapping[str, int] | None
    after: Mapping[str, int] | None
    detail: str = ""
    ship: tuple[str, ...] = ()
    """What a device must replace: the program's files whose bytes differ (all of a new one's), sorted."""
    why: str = ""
    """Why those files, in a few words (a changed program: the most telling part that differs)."""
    figures: FiguresChange | None = None
    """The change of its figures (a program in both releases), else None."""

    @property
    def size_before(self) -> int | None:
        return sum(self.before.values()) if self.before is not None else None

    @property
    def size_after(self) -> int | None:
        return sum(self.after.values()) if self.after is not None else None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "change": str(self.change),
            "bytes_before": self.size_before,
            "bytes_after": self.size_after,
            "files_before": dict(self.before) if self.before is not None else None,
            "files_after": dict(self.after) if self.after is not None else None,
            "detail": self.detail,
            "ship": list(self.ship),
            "why": self.why,
            "figures": self.figures.to_json() if self.figures is not None else None,
        }


@dataclass(frozen=True)
class BundleDiff:
    a: Path
    b: Path
    programs: tuple[ProgramChange, ...]
    operators_added: tuple[str, ...] = ()
    operators_removed: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    """Other files that differ, one line each (``robot.toml: changed``)."""

    @property
    def same(self) -> bool:
        return (all(p.change is Change.SAME for p in self.programs) and not self.files
                and not self.operators_added and not self.operators_removed)

    def to_json(self) -> dict[str, Any]:
        return {
            "a": str(self.a),
            "b": str(self.b),
            "same": self.same,
            "programs": [p.to_json() for p in self.programs],
            "operators_added": list(self.operators_added),
            "operators_removed": list(self.operators_removed),
            "files": list(self.files),
        }


@dataclass
class _Side:
    """One bundle as read: each file's digest and size, its record's programs, its kept copies."""

    digests: dict[str, tuple[str, int]]
    programs: dict[str, tuple[str, ...]]
    """Program -> its output files."""
    oplist: bytes | None
    scratch: Path
    """Where the ``.pte`` files are, to be compared part by part."""
    targets: dict[str, Any]
    """The build record's targets (for their figures)."""


def diff_bundles(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> BundleDiff:
    """Compare two bundles written by ``ptebuild pack`` (see the module docstring).

    Raises:
        UsageError: either is not a bundle, or holds an unsafe entry.
        FormatError: either cannot be read, or its build record is not one.
    """
    a, b = Path(a), Path(b)
    with ExitStack() as stack:
        first = stack.enter_context(_read(a))
        second = stack.enter_context(_read(b))
        return _diff(a, b, first, second)


def diff_folders(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> BundleDiff:
    """Compare two output folders by their build records, as two bundles are compared.

    Raises:
        UsageError: either has no build record.
        FormatError: either's build record is not one.
    """
    a, b = Path(a), Path(b)
    return _diff(a, b, _read_folder(a), _read_folder(b))


def _diff(a: Path, b: Path, first: _Side, second: _Side) -> BundleDiff:
    changes = [_compare(name, first, second) for name in sorted(set(first.programs) | set(second.programs))]
    ops_a, ops_b = _operators(first.oplist), _operators(second.oplist)
    outputs = {f for side in (first, second) for files in side.programs.values() for f in files}
    others = sorted((set(first.digests) | set(second.digests)) - outputs - _SKIPPED - {OPLIST_NAME})
    lines = []
    for name in others:
        before, after = first.digests.get(name), second.digests.get(name)
        if before != after:
            lines.append(f"{name}: {'added' if before is None else 'removed' if after is None else 'changed'}")
    return BundleDiff(a, b, tuple(changes), tuple(sorted(ops_b - ops_a)), tuple(sorted(ops_a - ops_b)), tuple(lines))


@contextmanager
def _read(path: Path) -> Iterator[_Side]:
    with bundle_files(path) as (folder, files, read), tempfile.TemporaryDirectory(prefix="ptebuild-diff-") as scratch:
        record = files.get(RECORD_NAME)
        if record is None or record.size > _METADATA_LIMIT:
            raise FormatError(f"{path}: {folder}/{RECORD_NAME}: missing or too large; give a bundle written by `ptebuild pack`")
        with read(record) as f:
            try:
                document = json.loads(f.read())
                targets = document["targets"]
                programs = {name: tuple(sorted(entry["outputs"])) for name, entry in targets.items()
                            if entry.get("kind", "program") == "program"}
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise FormatError(f"{path}: {folder}/{RECORD_NAME}: not a build record ({exc}); give a bundle written by `ptebuild pack`") from None
        digests = {}
        oplist = None
        for name, member in files.items():  # archive order: a .tar.gz is read front to back once
            keep = name.endswith(".pte") and "/" not in name
            with read(member) as f:
                if name == OPLIST_NAME and member.size <= _METADATA_LIMIT:
                    oplist = f.read()
                    digests[name] = (hash_chunks([oplist])[0], len(oplist))
                    continue
                out = open(Path(scratch, name), "xb") if keep else None
                try:
                    digests[name] = hash_chunks(iter(partial(f.read, _CHUNK), b""), out.write if out else None)
                finally:
                    if out is not None:
                        out.close()
        yield _Side(digests, programs, oplist, Path(scratch), dict(targets))


def _read_folder(folder: Path) -> _Side:
    from ptebuild.runtime.record import read_record_document

    document = read_record_document(folder) if folder.is_dir() else None
    if document is None:
        raise UsageError(f"diff: {folder}: no {RECORD_NAME} (an output folder of `ptebuild build`, or a bundle)")
    targets = document["targets"]
    programs = {name: tuple(sorted(entry["outputs"])) for name, entry in targets.items() if entry.get("kind", "program") == "program"}
    digests = {}
    for files in programs.values():
        for name in files:
            if name not in digests and (folder / name).is_file():
                digests[name] = hash_file(folder / name)
    oplist = folder / OPLIST_NAME
    return _Side(digests, programs, oplist.read_bytes() if oplist.is_file() else None, folder, dict(targets))


def _release_figures(side: _Side, name: str) -> ReleaseFigures:
    """A program's figures in one release: its record's, the files' sizes where it has none."""
    from ptebuild.insight.program import ProgramInsight

    entry = side.targets.get(name) or {}
    try:
        figures = ProgramInsight.from_json(entry.get("insight")) if isinstance(entry.get("insight"), dict) else None
    except (KeyError, TypeError, ValueError):
        figures = None
    checked = entry.get("checked") if isinstance(entry.get("checked"), dict) else None
    files = side.programs.get(name, ())
    pte = sum(side.digests[f][1] for f in files if f.endswith(".pte") and f in side.digests)
    ptd = sum(side.digests[f][1] for f in files if f.endswith(".ptd") and f in side.digests)
    return ReleaseFigures.of(figures, checked, pte_bytes=pte, ptd_bytes=ptd)


def _compare(name: str, a: _Side, b: _Side) -> ProgramChange:
    from dataclasses import replace

    change = _change(name, a, b)
    if change.change in (Change.ADDED, Change.REMOVED):
        return change
    return replace(change, figures=FiguresChange.between(_release_figures(a, name), _release_figures(b, name)))


def _change(name: str, a: _Side, b: _Side) -> ProgramChange:
    before = _sizes(a, name)
    after = _sizes(b, name)
    if before is None:
        return ProgramChange(name, Change.ADDED, before, after, ship=tuple(sorted(b.programs[name])),
                             why="not in the old release")
    if after is None:
        return ProgramChange(name, Change.REMOVED, before, after, why="not in the new release")
    files_a, files_b = set(a.programs[name]), set(b.programs[name])
    differing = tuple(sorted(f for f in files_a | files_b if a.digests.get(f) != b.digests.get(f)))
    ship = tuple(f for f in differing if f in files_b)

    def changed(detail: str, why: str | None = None) -> ProgramChange:
        return ProgramChange(name, Change.CHANGED, before, after, detail, ship, why if why is not None else detail)

    if not differing:
        return ProgramChange(name, Change.SAME, before, after)
    ptes = sorted(f for f in files_a if f.endswith(".pte"))
    if not ptes or ptes != sorted(f for f in files_b if f.endswith(".pte")):
        return changed("its program file was renamed")
    pte = ptes[0]
    weights = [f for f in differing if f.endswith(".ptd")]
    if pte not in differing:
        if set(differing) - set(weights):
            return changed("its test cases (.bpte) differ: " + ", ".join(differing))
        return ProgramChange(name, Change.WEIGHTS, before, after, ", ".join(weights), ship,
                             f"{pte} is byte-identical and names only keys the new .ptd holds")
    from ptebuild.runtime.diff import diff, weights_only

    left, right = a.scratch / pte, b.scratch / pte
    try:
        if weights_only(left, right):
            why = ("same plan and operators; the .pte names its weights by SHA-256, so it changes with them: ship both"
                   if weights else "same plan and operators; its weights are inside the .pte")
            return ProgramChange(name, Change.PROGRAM_AND_WEIGHTS, before, after,
                                 ", ".join(weights) or f"the weights inside {pte}", ship, why)
        report = diff(left, right)
    except (FormatError, OSError) as exc:
        return changed(f"{pte} cannot be compared: {exc}")
    # What a reader of a release wants first: a method, its plan or payload; sizes and offsets follow from them.
    first = min(report.differences, key=lambda d: _TELLING.index(d.part) if d.part in _TELLING else len(_TELLING), default=None)
    detail = f"{pte}: {first}" if first is not None else ""
    more = len(report.differences) - 1
    return changed(detail + (f" (and {more} more parts)" if more > 0 else ""))


def _sizes(side: _Side, name: str) -> dict[str, int] | None:
    files = side.programs.get(name)
    if files is None:
        return None
    return {f: side.digests[f][1] for f in files if f in side.digests}


def _operators(data: bytes | None) -> set[str]:
    if data is None:
        return set()
    import yaml

    try:
        document = yaml.safe_load(data)
        return set((document or {}).get("operators") or {})
    except (yaml.YAMLError, AttributeError, TypeError):
        return set()
