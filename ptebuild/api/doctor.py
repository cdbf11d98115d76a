"""``ptebuild.doctor()``: what this machine can lower and check, per backend, and why not.

Every backend of the registry is a row, installed plug-ins too (with their distribution); a
plug-in that cannot be loaded is a row that says why, in one line.

The same answers a build acts on before it lowers anything (:mod:`ptebuild.builder.capabilities`):
the backends' cheap hooks (a GPU, a compiler) and the probe's verdict for this toolchain (a 1-op
program lowered and checked in a fresh interpreter, once per toolchain, then read from its JSON
file). ``probe=False`` reports only what is known without starting the probe.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class BackendRow:
    """One backend on this machine: can it lower, can its check run, and why not."""

    backend: str
    lower: bool | None
    """None: not known (the probe was not run)."""
    check: bool | None
    check_kind: str
    why: str = ""
    detail: str = ""
    plugin: str | None = None
    """The distribution (and version) of a plug-in backend; None for ptebuild's own."""

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "lower": self.lower, "check": self.check, "check_kind": self.check_kind,
                "why": self.why, "detail": self.detail, "plugin": self.plugin}


@dataclass(frozen=True)
class DoctorReport:
    backends: tuple[BackendRow, ...]
    facts: dict[str, str] = field(default_factory=dict)
    """The toolchain the verdicts belong to (versions, interpreter, digests of what decides them)."""
    verdicts: Path | None = None
    """The verdict file (absent when nothing was probed)."""
    problems: tuple[str, ...] = ()
    """One line per installed plug-in left out (a name taken...): those that fail to load have a row."""

    def to_json(self) -> dict[str, Any]:
        return {
            "backends": [row.to_json() for row in self.backends],
            "toolchain": dict(sorted(self.facts.items())),
            "verdicts": str(self.verdicts) if self.verdicts else None,
            "plugin_problems": list(self.problems),
        }


def doctor(cache: str | os.PathLike[str] | None = None, probe: bool = True,
           progress: Callable[[str], None] | None = None) -> DoctorReport:
    """Each registered backend's row, and the toolchain facts. Raises UsageError for a bad ``cache``."""
    from ptebuild.backends import backend_names, get_backend, registry_problems
    from ptebuild.backends import entries as backend_entries
    from ptebuild.builder.capabilities import Capabilities
    from ptebuild.cache_dir import cache_folder
    from ptebuild.errors import PluginError
    from ptebuild.hashing import hash_file

    root = cache_folder(cache)
    capabilities = Capabilities(root, hash_file, progress)
    entries = backend_entries()
    origin = {name: f"{e.distribution} {e.version}" for name, e in entries.items() if e.plugin}
    backends = {}
    broken = {}
    for name in backend_names():
        try:
            backends[name] = get_backend(name)
        except PluginError as exc:  # listed, with why it cannot be used
            broken[name] = str(exc)
    cheap = {name: backend.can_build(None) for name, backend in backends.items()}
    candidates = [name for name, reason in cheap.items() if reason is None]
    verdicts = capabilities.verdicts(candidates) if probe else capabilities.known()
    rows = []
    facts = dict(capabilities.facts)
    for name in backend_names():
        if name in broken:
            rows.append(BackendRow(name, False, False, "-", broken[name], plugin=origin.get(name)))
            continue
        backend = backends[name]
        for key, value in backend.toolchain_facts({}).items():
            facts.setdefault(f"toolchain.{key}", str(value))
        kind = backend.check_kind(None).name
        cannot = cheap[name]
        if cannot is not None:
            rows.append(BackendRow(name, False, False, kind, cannot, plugin=origin.get(name)))
            continue
        verdict = verdicts.get(name)
        cheap_check = backend.can_check(None)
        if verdict is None:
            rows.append(BackendRow(name, None, None if cheap_check is None else False, kind,
                                   cheap_check or "not probed yet (ptebuild doctor probes it)", plugin=origin.get(name)))
            continue
        check_problem = verdict.check if verdict.lower is None else "cannot lower"
        check_problem = cheap_check or check_problem
        why = verdict.lower or check_problem or ""
        rows.append(BackendRow(name, verdict.lower is None, check_problem is None, kind, why, verdict.detail,
                               plugin=origin.get(name)))
    path = capabilities.path if capabilities.path.is_file() else None
    return DoctorReport(tuple(rows), facts, path, registry_problems())
