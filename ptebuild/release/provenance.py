"""The provenance statement of a release bundle: in-toto Statement v1 with a SLSA Provenance v1 predicate.

Specs: https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md and
https://slsa.dev/spec/v1.0/provenance. Shape::

    {"_type": "https://in-toto.io/Statement/v1",
     "subject": [{"name": "tiny_xnnpack.pte", "digest": {"sha256": "..."}}, ...],   # sorted by name
     "predicateType": "https://slsa.dev/provenance/v1",
     "predicate": {
       "buildDefinition": {
         "buildType": "https://ptebuild.dev/buildtypes/manifest/v1",
         "externalParameters": {"manifest": {"path": "tiny.toml", "digest": {"sha256": "..."}},
                                "targets": ["tiny_portable", "tiny_xnnpack"],
                                "bundle": "android"},                    # only when a declared bundle was packed
         "internalParameters": {"toolchain": {"torch": "2.13.0+cpu", ...},        # shared by all targets
                                "targets": {"tiny_xnnpack": {"kind": "program", "backend": "xnnpack",
                                                             "key": "...", "toolchain": {...},   # toolchain: only where it differs
                                                             "runtime": {...}}}},  # the runtimes that load it (ptebuild.runtime.compat)
         "resolvedDependencies": [
           {"name": "source:tinymodels/tiny.py", "digest": {"sha256": "..."}, "annotations": {"targets": [...]}},
           {"name": "weights:weights/w.pt", "digest": {"sha256": "..."}, ...},
           {"name": "pypi:torchao", "uri": "pkg:pypi/torchao@0.18.0", ...}]},
       "runDetails": {"builder": {"id": "https://ptebuild.dev/builder/v1", "version": {"ptebuild": "0.1.0"}},
                      "metadata": {}}}}                # startedOn/finishedOn only with SOURCE_DATE_EPOCH

Deterministic: sorted lists, no wall-clock time, no host name, no absolute path. Dependencies are
merged over targets (one entry per name and digest, naming the targets that used it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ptebuild.keyinputs import InputKind, InputName, of_kind, source
from ptebuild.release.lock import LockEntry

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://ptebuild.dev/buildtypes/manifest/v1"
BUILDER_ID = "https://ptebuild.dev/builder/v1"
PROVENANCE_NAME = "provenance.intoto.json"


def provenance_statement(
    subjects: Iterable[tuple[str, str]],
    manifest_name: str,
    manifest_sha256: str,
    entries: Mapping[str, LockEntry],
    source_date_epoch: int | None = None,
    bundle: str | None = None,
) -> dict[str, Any]:
    """The statement for the artifacts ``subjects`` (``(file name, sha256)``) built from ``entries``.

    ``source_date_epoch``: when given, ``startedOn``/``finishedOn`` are that time; otherwise
    the statement carries no time at all. ``bundle``: the name of the manifest's bundle packed.
    A target's ``runtime`` is its entry's.
    """
    from ptebuild._version import __version__

    names = sorted(entries)
    toolchains = {name: dict(sorted(of_kind(entries[name].inputs, InputKind.TOOLCHAIN).items())) for name in names}
    shared = _shared(list(toolchains.values()))
    targets: dict[str, Any] = {}
    for name in names:
        entry = entries[name]
        target: dict[str, Any] = {"kind": entry.kind, "key": entry.key}
        if entry.backend:
            target["backend"] = entry.backend
        own = {k: v for k, v in toolchains[name].items() if shared.get(k) != v}
        if own:
            target["toolchain"] = own
        if entry.runtime is not None:
            target["runtime"] = entry.runtime.to_json()
        targets[name] = target
    external: dict[str, Any] = {
        "manifest": {"path": manifest_name, "digest": {"sha256": manifest_sha256}},
        "targets": names,
    }
    if bundle is not None:
        external["bundle"] = bundle
    metadata: dict[str, Any] = {}
    if source_date_epoch is not None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(source_date_epoch))
        metadata = {"startedOn": stamp, "finishedOn": stamp}
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": digest}} for name, digest in sorted(subjects)],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": external,
                "internalParameters": {"toolchain": shared, "targets": targets},
                "resolvedDependencies": _dependencies(entries),
            },
            "runDetails": {
                "builder": {"id": BUILDER_ID, "version": {"ptebuild": __version__}},
                "metadata": metadata,
            },
        },
    }


def dumps_statement(statement: Mapping[str, Any]) -> bytes:
    """The statement as bytes: sorted keys, two-space indent, final newline."""
    return (json.dumps(statement, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def subjects_of(statement: Any) -> dict[str, str] | str:
    """``{name: sha256}`` of a parsed statement, or a one-line reason it is not one."""
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        return f"_type is not {STATEMENT_TYPE!r}"
    if statement.get("predicateType") != PREDICATE_TYPE:
        return f"predicateType is not {PREDICATE_TYPE!r}"
    subjects = statement.get("subject")
    if not isinstance(subjects, list):
        return "subject is not a list"
    found: dict[str, str] = {}
    for index, subject in enumerate(subjects):
        name = subject.get("name") if isinstance(subject, dict) else None
        digest = subject.get("digest") if isinstance(subject, dict) else None
        sha256 = digest.get("sha256") if isinstance(digest, dict) else None
        if not isinstance(name, str) or not isinstance(sha256, str):
            return f"subject[{index}] needs a name and a sha256 digest"
        found[name] = sha256
    return found


def _shared(tables: list[dict[str, str]]) -> dict[str, str]:
    if not tables:
        return {}
    first = tables[0]
    return {k: v for k, v in first.items() if all(t.get(k) == v for t in tables[1:])}


def _dependencies(entries: Mapping[str, LockEntry]) -> list[dict[str, Any]]:
    """Sources, weights, samples and discovered dependencies of every target, merged and sorted."""
    found: dict[tuple[str, str, str], set[str]] = {}

    def add(name: str, uri: str, sha256: str, target: str) -> None:
        found.setdefault((name, uri, sha256), set()).add(target)

    for target, entry in entries.items():
        for key, value in entry.inputs.items():
            if InputName.parse(key).kind in (InputKind.SOURCE, InputKind.WEIGHTS, InputKind.SAMPLES):
                add(key, "", value, target)
        if entry.deps is not None:
            for file, sha256 in entry.deps.sources:
                add(source(file), "", sha256, target)
            for dist, version in entry.deps.dists:
                add(f"pypi:{dist}", f"pkg:pypi/{dist}@{version}", "", target)
    resolved = []
    for (name, uri, sha256), targets in sorted(found.items()):
        item: dict[str, Any] = {"name": name}
        if uri:
            item["uri"] = uri
        if sha256:
            item["digest"] = {"sha256": sha256}
        item["annotations"] = {"targets": sorted(targets)}
        resolved.append(item)
    return resolved
