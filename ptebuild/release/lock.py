"""The lockfile ``ptebuild.lock``: what each target was built from, and the bytes it gave.

Written beside the manifest by ``ptebuild lock`` and committed; ``ptebuild build --locked``
compares a build with it (:func:`compare_lock`), as Cargo's ``--locked`` does with
``Cargo.lock``. TOML, written with tomli-w, every table and key sorted so that a change shows
as a small diff::

    # ptebuild.lock: written by `ptebuild lock`; commit it, do not edit it.
    format = "ptebuild-lock"
    version = 2
    manifest = "robot.toml"                 # the manifest's file name (same folder)

    [targets.policy_xnnpack]
    kind = "program"                        # or "shims"
    backend = "xnnpack"
    key = "00d1d9ef1895a3d11baf3e1976b76830"   # the action key

    [targets.policy_xnnpack.manifest]       # manifest.* inputs of the key (normalised JSON text)
    "model.factory" = '"models.robot_policy:make_policy"'
    [targets.policy_xnnpack.sources]        # source:<name> inputs: file -> sha256
    "models/robot_policy.py" = "761077ba..."
    [targets.policy_xnnpack.weights]        # weights:<name> inputs: file -> sha256
    [targets.policy_xnnpack.toolchain]      # toolchain.* inputs: name -> version
    torch = "2.13.0+cpu"
    [targets.policy_xnnpack.other]          # any other input of the key (e.g. its schema)
    [targets.policy_xnnpack.deps.sources]   # discovered while lowering: file -> sha256
    [targets.policy_xnnpack.deps.dists]     # discovered while lowering: distribution -> version
    [targets.policy_xnnpack.outputs."policy_xnnpack.pte"]
    sha256 = "06d4267f..."
    size = 6512
    [targets.policy_xnnpack.runtime]        # the runtimes that load it (ptebuild.runtime.compat)
    writer = "1.5.1"                        # the executorch release that wrote it
    minimum = "0.7.0"                       # the oldest runtime that reads every feature it uses
    guaranteed = ">=1.5.1,<1.7.0"           # what ExecuTorch's compatibility policy promises
    backends = ["XnnpackBackend"]
    [targets.policy_xnnpack.runtime.requires]   # feature -> the first runtime that reads it
    external-data = "0.7.0"
    [targets.policy_xnnpack.runtime.files."policy_xnnpack.pte"]
    format = "ET12"                         # file identifier; ET12 .pte, FT01 .ptd, BP08 .bpte
    schema_version = 0

Versions: 2 added ``runtime``; version 1 (without it) is still read. A reader refuses fields it
does not know, so a new field is a new version.

Empty tables are left out. ``deps`` is absent when the build record had no discovered
dependencies for the target (an older record), and then :func:`compare_lock` does not compare
them. Nothing in the file depends on where the project or the cache lives.
"""

from __future__ import annotations

import enum
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptebuild.deps import Dependencies
from ptebuild.errors import FormatError, UsageError
from ptebuild.keyinputs import InputKind, InputName, change_words, describe_change, toolchain
from ptebuild.results import ActionResult, OutputFile
from ptebuild.runtime.compat import RuntimeSupport

LOCK_NAME = "ptebuild.lock"
FORMAT = "ptebuild-lock"
VERSION = 2
READS = (1, 2)
"""The versions this ptebuild reads (it writes :data:`VERSION`)."""
HEADER = "# ptebuild.lock: written by `ptebuild lock`; commit it, do not edit it.\n"
_HEX64 = re.compile(r"[0-9a-f]{64}")
_FIX = "regenerate it with `ptebuild lock MANIFEST`"

# Input kind -> lock table; an input's name within its kind is its key in that table.
_TABLES = {
    InputKind.MANIFEST: "manifest",
    InputKind.SOURCE: "sources",
    InputKind.WEIGHTS: "weights",
    InputKind.TOOLCHAIN: "toolchain",
}
_OTHER = "other"
"""Every other input, by its whole text form."""
_INPUT_TABLES = (*_TABLES.values(), _OTHER)


@dataclass(frozen=True)
class LockEntry:
    """One target of the lock. ``deps``/``outputs`` are None when unknown (not yet built)."""

    name: str
    kind: str
    key: str
    backend: str | None = None
    inputs: Mapping[str, str] = field(default_factory=dict)
    """The action key's breakdown, by input name (``source:<file>``, ``toolchain.torch``...)."""
    deps: Dependencies | None = None
    outputs: tuple[OutputFile, ...] | None = None
    runtime: RuntimeSupport | None = None
    """The runtimes that load the program's outputs (None: a shim library, or not known)."""

    def output(self, name: str) -> OutputFile | None:
        return next((o for o in self.outputs or () if o.name == name), None)

    def to_toml(self) -> dict[str, Any]:
        table: dict[str, Any] = {"kind": self.kind, "key": self.key}
        if self.backend:
            table["backend"] = self.backend
        groups: dict[str, dict[str, str]] = {}
        for text, value in self.inputs.items():
            name = InputName.parse(text)
            if name.kind in _TABLES:
                groups.setdefault(_TABLES[name.kind], {})[name.name] = value
            else:
                groups.setdefault(_OTHER, {})[text] = value
        table.update({group: values for group, values in groups.items() if values})
        if self.deps is not None:
            table["deps"] = {"sources": dict(self.deps.sources), "dists": dict(self.deps.dists)}
        if self.outputs is not None:
            table["outputs"] = {o.name: {"sha256": o.sha256, "size": o.size} for o in self.outputs}
        if self.runtime is not None:
            table["runtime"] = {k: v for k, v in self.runtime.to_json().items() if v is not None and v != {} and v != []}
        ordered: dict[str, Any] = _sorted(table)  # a dict sorts into a dict
        return ordered

    @classmethod
    def from_toml(cls, name: str, table: Any, where: str) -> LockEntry:
        """Raises FormatError naming ``where`` (``file: targets.NAME``) and the bad field."""
        table = _expect(table, dict, where, "a table")
        unknown = sorted(set(table) - {"kind", "key", "backend", "deps", "outputs", "runtime", *_INPUT_TABLES})
        if unknown:
            raise FormatError(f"{where}.{unknown[0]}: unknown field ({_FIX})")
        inputs: dict[str, str] = {}
        for kind, group in _TABLES.items():
            for key, value in _string_table(table.get(group, {}), f"{where}.{group}").items():
                inputs[str(InputName(kind, key))] = value
        inputs.update(_string_table(table.get(_OTHER, {}), f"{where}.{_OTHER}"))
        deps = None
        if "deps" in table:
            raw = _expect(table["deps"], dict, f"{where}.deps", "a table")
            deps = Dependencies(
                tuple(sorted(_string_table(raw.get("sources", {}), f"{where}.deps.sources").items())),
                tuple(sorted(_string_table(raw.get("dists", {}), f"{where}.deps.dists").items())),
            )
        outputs = None
        if "outputs" in table:
            files = []
            for file, info in sorted(_expect(table["outputs"], dict, f"{where}.outputs", "a table").items()):
                at = f"{where}.outputs.{_toml_key(file)}"
                info = _expect(info, dict, at, "a table with sha256 and size")
                sha256 = _expect(info.get("sha256"), str, f"{at}.sha256", "a sha256 hex string")
                if not _HEX64.fullmatch(sha256):
                    raise FormatError(f"{at}.sha256: {sha256!r} is not a sha256 hex digest ({_FIX})")
                size = info.get("size")
                if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                    raise FormatError(f"{at}.size: expected a size in bytes ({_FIX})")
                files.append(OutputFile(file, sha256, size))
            outputs = tuple(files)
        runtime = None
        if "runtime" in table:
            try:
                runtime = RuntimeSupport.from_json({"files": {}, **_expect(table["runtime"], dict, f"{where}.runtime", "a table")})
            except (TypeError, ValueError) as exc:
                raise FormatError(f"{where}.runtime: {exc} ({_FIX})") from None
        backend = table.get("backend")
        return cls(
            name=name,
            kind=_expect(table.get("kind"), str, f"{where}.kind", "a string"),
            key=_expect(table.get("key"), str, f"{where}.key", "a string"),
            backend=_expect(backend, str, f"{where}.backend", "a string") if backend is not None else None,
            inputs=inputs,
            deps=deps,
            outputs=outputs,
            runtime=runtime,
        )


@dataclass(frozen=True)
class Lock:
    """A lockfile's contents. ``manifest``: the manifest's file name, as written."""

    entries: Mapping[str, LockEntry]
    manifest: str | None = None
    path: Path | None = None

    def to_toml(self) -> dict[str, Any]:
        document: dict[str, Any] = {"format": FORMAT, "version": VERSION}
        if self.manifest:
            document["manifest"] = self.manifest
        document["targets"] = {name: self.entries[name].to_toml() for name in sorted(self.entries)}
        return document


class MismatchKind(str, enum.Enum):
    """Why a build does not match its lock."""

    STALE = "stale"
    """An input of a target changed since the lock was written (the key differs)."""
    UNLOCKED = "unlocked"
    """The manifest has a target the lock does not know."""
    EXTRA = "extra"
    """The lock has a target the manifest no longer declares."""
    OUTPUT = "output"
    """Same inputs, other bytes: a reproducibility regression."""
    NO_LOCK = "no-lock"
    """There is no lockfile at all."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Mismatch:
    """One difference between a lock and a build; ``str()`` is the one-line message."""

    kind: MismatchKind
    target: str
    subject: str
    """The input (``weights:w.pt``, ``toolchain.torch``...) or output file name concerned."""
    message: str

    def __str__(self) -> str:
        return self.message

    def fix(self, manifest: str | Path = "MANIFEST") -> str:
        """What to do about it, when the message does not say it already."""
        if self.kind is MismatchKind.STALE:
            return f"run `ptebuild lock {manifest}` to build and lock what changed, or undo the change"
        if self.kind is MismatchKind.OUTPUT:
            return f"`ptebuild build --reproduce {manifest}` names the part that is not reproducible"
        return ""

    def to_json(self) -> dict[str, str]:
        return {"kind": str(self.kind), "target": self.target, "subject": self.subject, "message": self.message}


def lock_entries_from_record(record_targets: Mapping[str, Any]) -> dict[str, LockEntry]:
    """Lock entries from a build record's ``targets`` (``ptebuild.json``).

    Tolerates entries without ``inputs``/``deps``/``key``/``runtime`` (records written before
    they were added): those parts are empty, and ``deps`` and ``runtime`` are None.
    """
    entries = {}
    for name, entry in sorted(record_targets.items()):
        outputs = tuple(
            OutputFile(file, info["sha256"], info["bytes"]) for file, info in sorted(entry["outputs"].items())
        )
        entries[name] = LockEntry(
            name=name,
            kind=str(entry.get("kind", "program")),
            key=str(entry.get("key", "")),
            backend=entry.get("backend"),
            inputs={str(k): str(v) for k, v in (entry.get("inputs") or {}).items()},
            deps=Dependencies.from_json(entry["deps"]) if entry.get("deps") is not None else None,
            outputs=outputs,
            runtime=_runtime(entry.get("runtime")),
        )
    return entries


def _runtime(data: Any) -> RuntimeSupport | None:
    if data is None:
        return None
    try:
        return RuntimeSupport.from_json(data)
    except (TypeError, ValueError):
        return None  # an entry a newer or broken ptebuild wrote: the lock leaves it out


def lock_entry_from_result(result: ActionResult, with_outputs: bool = True) -> LockEntry:
    """The lock entry of one action result (``with_outputs=False``: inputs only, for a check before building)."""
    return LockEntry(
        name=result.target,
        kind=result.kind,
        key=result.key,
        backend=result.backend,
        inputs=dict(result.inputs),
        deps=result.deps,
        outputs=tuple(sorted(result.outputs, key=lambda o: o.name)) if with_outputs else None,
    )


def dumps_lock(lock: Lock) -> str:
    import tomli_w

    return HEADER + tomli_w.dumps(lock.to_toml())


def write_lock(path: str | Path, entries: Mapping[str, LockEntry], manifest: str | None = None) -> Lock:
    """Write ``entries`` to ``path`` atomically; ``manifest`` is the manifest's file name."""
    from ptebuild.atomic import write_atomically

    path = Path(path)
    lock = Lock(dict(entries), manifest, path)
    write_atomically(path, dumps_lock(lock).encode("utf-8"))
    return lock


def loads_lock(text: str, source: str) -> Lock:
    """Parse a lockfile's text; ``source`` names it in messages. Raises FormatError."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FormatError(f"{source}: not valid TOML: {exc} ({_FIX})") from None
    if document.get("format") != FORMAT:
        raise FormatError(f"{source}: format: not a ptebuild lockfile, expected format = {FORMAT!r} ({_FIX})")
    if document.get("version") not in READS:
        raise FormatError(
            f"{source}: version: lockfile version {document.get('version')!r}, this ptebuild reads "
            f"{' and '.join(map(str, READS))} ({_FIX})"
        )
    manifest = document.get("manifest")
    if manifest is not None and not isinstance(manifest, str):
        raise FormatError(f"{source}: manifest: expected the manifest's file name ({_FIX})")
    targets = _expect(document.get("targets", {}), dict, f"{source}: targets", "a table")
    entries = {
        name: LockEntry.from_toml(name, table, f"{source}: targets.{_toml_key(name)}")
        for name, table in sorted(targets.items())
    }
    return Lock(entries, manifest)


def read_lock(path: str | Path) -> Lock:
    """Read the lockfile at ``path``.

    Raises:
        UsageError: there is no such file.
        FormatError: the file is not a valid lockfile; one line naming the file and the field.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no lockfile (write it with `ptebuild lock MANIFEST`)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FormatError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc} ({_FIX})") from None
    lock = loads_lock(text, str(path))
    return Lock(lock.entries, lock.manifest, path)


def compare_lock(lock: Lock, entries: Mapping[str, LockEntry], subset: bool = False) -> list[Mismatch]:
    """What differs between ``lock`` and a build's ``entries``; empty when the build is locked.

    Inputs are compared for every target (a changed input: :attr:`MismatchKind.STALE`, one
    mismatch per input); discovered dependencies and outputs only where both sides know
    them, outputs only when the key is unchanged (new inputs may give new bytes).
    ``subset``: ``entries`` is part of the manifest (``--only``); targets only in the lock
    are then not reported.
    """
    mismatches: list[Mismatch] = []
    for name in sorted(set(lock.entries) | set(entries)):
        old, new = lock.entries.get(name), entries.get(name)
        if old is None:
            assert new is not None
            mismatches.append(
                Mismatch(
                    MismatchKind.UNLOCKED, name, name,
                    f"lock is stale: {_what(new)} {name} is not in the lock (run `ptebuild lock MANIFEST`)",
                )
            )
            continue
        if new is None:
            if not subset:
                mismatches.append(
                    Mismatch(
                        MismatchKind.EXTRA, name, name,
                        f"lock is stale: it has {_what(old)} {name}, which the manifest no longer declares "
                        "(run `ptebuild lock MANIFEST`)",
                    )
                )
            continue
        mismatches.extend(_compare_entry(old, new))
    return mismatches


def check_locked(lock_path: str | Path, entries: Mapping[str, LockEntry], subset: bool = False) -> list[Mismatch]:
    """What ``build --locked`` reports: :func:`compare_lock` against the lock at ``lock_path``.

    A missing lockfile is a mismatch too (``--locked`` fails with exit 1, as Cargo's does),
    not a usage error. Raises FormatError for a lockfile that cannot be parsed.
    """
    path = Path(lock_path)
    if not path.is_file():
        return [
            Mismatch(
                MismatchKind.NO_LOCK, "", str(path),
                f"{path}: no lockfile, and --locked needs one (write it with `ptebuild lock MANIFEST` and commit it)",
            )
        ]
    return compare_lock(read_lock(path), entries, subset=subset)


def _not_deciding(entry: LockEntry) -> frozenset[str]:
    """Inputs of ``entry``'s key that do not decide its bytes: the platform, for a backend whose
    programs are the same on every platform (a lock made on a laptop holds on CI)."""
    if entry.backend is None:
        return frozenset()
    from ptebuild.backends import get_backend

    try:
        backend = get_backend(entry.backend)
    except KeyError:
        return frozenset()
    return frozenset({toolchain("platform")}) if backend.same_bytes_on_every_platform else frozenset()


def _compare_entry(old: LockEntry, new: LockEntry) -> list[Mismatch]:
    found: list[Mismatch] = []
    prefix = f"lock is stale for {_what(new)} {new.name}"
    ignored = _not_deciding(new)
    changed = {name for name in set(old.inputs) | set(new.inputs) if old.inputs.get(name) != new.inputs.get(name)}
    if new.inputs:
        for name in sorted(changed - ignored):
            before, after = old.inputs.get(name), new.inputs.get(name)
            found.append(Mismatch(MismatchKind.STALE, new.name, name,
                                  f"{prefix}: {describe_change(name, before, after, detail=True)}"))
    if old.deps is not None and new.deps is not None:
        for group, label in (("sources", "discovered source file"), ("dists", "discovered distribution")):
            old_deps: dict[str, str] = dict(getattr(old.deps, group))
            new_deps: dict[str, str] = dict(getattr(new.deps, group))
            for dep in sorted(set(old_deps) | set(new_deps)):
                if old_deps.get(dep) != new_deps.get(dep):
                    change = change_words(old_deps.get(dep), new_deps.get(dep), digest=group == "sources", detail=True)
                    found.append(Mismatch(MismatchKind.STALE, new.name, f"deps.{group}:{dep}", f"{prefix}: {label} {dep} {change}"))
    only_ignored = bool(changed) and not (changed - ignored)
    if old.key != new.key and new.key and not only_ignored:
        if not found:
            found.append(
                Mismatch(
                    MismatchKind.STALE, new.name, "key",
                    f"{prefix}: its action key changed ({old.key[:12]}... -> {new.key[:12]}...; "
                    "a newer ptebuild keys it differently)",
                )
            )
        return found
    if found or old.outputs is None or new.outputs is None:
        return found
    for file in sorted({o.name for o in old.outputs} | {o.name for o in new.outputs}):
        locked, built = old.output(file), new.output(file)
        where = f"{_what(new)} {new.name}: output {file}"
        if built is None:
            message = f"{where} is in the lock but was not built"
        elif locked is None:
            message = f"{where} is not in the lock"
        elif (built.sha256, built.size) != (locked.sha256, locked.size):
            message = (
                f"{where} differs from the lock (sha256 {built.sha256[:12]}..., {built.size} bytes; the lock has "
                f"{locked.sha256[:12]}..., {locked.size} bytes): same inputs, other bytes, the build is not reproducible"
            )
        else:
            continue
        found.append(Mismatch(MismatchKind.OUTPUT, new.name, file, message))
    return found


def _what(entry: LockEntry) -> str:
    return "shim library" if entry.kind == "shims" else "program"


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    return value


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else f'"{key}"'


def _expect(value: Any, kind: type, where: str, what: str) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise FormatError(f"{where}: expected {what} ({_FIX})")
    return value


def _string_table(value: Any, where: str) -> dict[str, str]:
    table = _expect(value, dict, where, "a table of strings")
    for key, item in table.items():
        if not isinstance(item, str):
            raise FormatError(f"{where}.{_toml_key(key)}: expected a string ({_FIX})")
    return dict(table)
