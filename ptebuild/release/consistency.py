"""A release never contradicts itself: what a build record or a lock says was built, against the manifest as it stands.

``pack`` packs an output folder (or, ``--from-cache``, the outputs a lock names) together with the
manifest as it is now. If the manifest, the model's code or its weights changed since that build
(a new ``seed``, an edited module), the bundle would ship the old programs beside a manifest that
does not make them. :func:`stale_targets` finds that before anything is packed: for each target,
the inputs of its action key as the project gives them now (:func:`ptebuild.builder.keys.
program_inputs`: the manifest's entries, the model's sources, its weights file, ptebuild's own
code; no torch) against those the record or lock entry was built from, and the project files its
lowering was found to read (its discovered dependencies). The toolchain is left out (torch's and
executorch's versions, the platform, a GPU's facts): a folder may hold programs restored from a
machine with another toolchain, which ``build`` restores rather than rebuilds.

A bundle carries no model code, so ``verify`` of a bundle compares what it can
(:func:`manifest_disagreements`): its manifest's entries, resolved without the project, against
the ``manifest.*`` inputs its record names for each program; the record against the lock and the
files is :mod:`ptebuild.release.bundle`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ptebuild import keyinputs
from ptebuild.keyinputs import InputKind
from ptebuild.plan import BuildPlan
from ptebuild.release.lock import LockEntry

DigestFile = Callable[[Path], tuple[str, int]]

_PROJECT = (InputKind.SCHEMA, InputKind.MANIFEST, InputKind.SOURCE, InputKind.WEIGHTS, InputKind.SHIMS)
_OWN_CODE = (keyinputs.toolchain("ptebuild"), keyinputs.toolchain("ptebuild-code"))
"""Of the toolchain, what is the same on every machine that builds for one release: ptebuild itself."""


@dataclass(frozen=True)
class Stale:
    """A target whose recorded build the manifest as it stands would not produce."""

    target: str
    kind: str
    """``program`` or ``shim library``."""
    changes: tuple[str, ...]
    """What changed, in words (``manifest field models.policy.seed changed (20261129 -> 20261130)``)."""

    def line(self) -> str:
        more = f" (and {len(self.changes) - 1} more)" if len(self.changes) > 1 else ""
        return f"{self.kind} {self.target} was built from other inputs than the manifest gives now: {self.changes[0]}{more}"


def _project_inputs(inputs: Mapping[str, str]) -> dict[str, str]:
    return keyinputs.without(inputs, [InputKind.TOOLCHAIN, InputKind.OTHER, InputKind.MEMBER], keep=_OWN_CODE)


def current_inputs(plan: BuildPlan, name: str, digest_file: DigestFile) -> tuple[str, dict[str, str], str] | None:
    """``(kind, inputs, model)`` of target ``name`` as the project gives them now (no torch), or None
    when the manifest does not declare it. Raises ManifestError for a file it names that cannot be read."""
    from ptebuild.builder import keys

    program = next((p for p in plan.programs if p.name == name), None)
    if program is not None:
        return "program", keys.program_inputs(program, plan, digest_file), program.model
    shim = next((s for s in plan.shims if s.name == name), None)
    if shim is not None:
        return "shim library", keys.shim_inputs(shim, plan, digest_file), ""
    return None


def stale_targets(plan: BuildPlan, entries: Mapping[str, LockEntry], digest_file: DigestFile) -> list[Stale]:
    """The targets of ``entries`` (a record's, through :func:`~ptebuild.release.lock.lock_entries_from_record`,
    or a lock's) that the manifest as it stands would not produce; each with its changed inputs."""
    from ptebuild.deps import DependencyCheck

    check = DependencyCheck(Path(plan.manifest_dir), digest_file)
    found = []
    for name, entry in sorted(entries.items()):
        now = current_inputs(plan, name, digest_file)
        if now is None:
            found.append(Stale(name, "target", ("the manifest no longer declares it",)))
            continue
        kind, inputs, model = now
        if not entry.inputs:
            continue  # an entry that names no inputs (an old record) says nothing to compare
        before, after = _project_inputs(entry.inputs), _project_inputs(inputs)
        changes = [
            keyinputs.describe_change(text, before.get(text), after.get(text), model=model, program=name, detail=True)
            for text in sorted(set(before) | set(after))
            if before.get(text) != after.get(text)
        ]
        if entry.deps is not None:
            changes += check.changes(entry.deps, project_only=True)
        if changes:
            found.append(Stale(name, kind, tuple(changes)))
    return found


def manifest_disagreements(plan: BuildPlan, entries: Mapping[str, LockEntry]) -> list[str]:
    """Where a bundle's record (``entries``, through :func:`~ptebuild.release.lock.lock_entries_from_record`)
    was built from other manifest entries than the bundle's manifest (``plan``, resolved without
    the project) gives: one line each."""
    from ptebuild.builder import keys

    lines = []
    for name, entry in sorted(entries.items()):
        if entry.kind != "program":
            continue
        program = next((p for p in plan.programs if p.name == name), None)
        if program is None:
            lines.append(f"its record has program {name}, which the manifest does not declare")
            continue
        recorded = keyinputs.of_kind(entry.inputs, InputKind.MANIFEST)
        if not recorded:
            continue
        given = keyinputs.of_kind(keys.manifest_inputs(program), InputKind.MANIFEST)
        changed = sorted(n for n in set(recorded) | set(given) if recorded.get(n) != given.get(n))
        if changed:
            more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
            words = keyinputs.describe_change(keyinputs.manifest(changed[0]), recorded.get(changed[0]), given.get(changed[0]),
                                              model=program.model, program=name, detail=True)
            lines.append(f"program {name} was built from other manifest entries than it holds: {words}{more}")
    return lines
