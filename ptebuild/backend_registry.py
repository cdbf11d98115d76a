"""Which backends there are and where each one's code lives: ptebuild's own, and installed plug-ins.

ptebuild's own backends are :data:`ptebuild.backends.BUILTIN_BACKENDS` (manifest name -> module;
a new one is a module or package under ``ptebuild/backends/`` and one line there), handed to
:func:`entries` by the package that holds them: this module, on the bottom floor, names none of
them. A separately installed distribution adds a backend through an entry point of the group
:data:`GROUP`, in its ``pyproject.toml``::

    [project.entry-points."ptebuild.backends"]
    demo = "ptebuild_demo_backend:BACKEND"

The entry point's name is what a manifest writes (``backend = "demo"``); its object is a
:class:`ptebuild.backends.base.Backend` of that name (``module:attribute``; a bare module stands
for its ``BACKEND``). A plug-in cannot take a name ptebuild's own backends, or another plug-in
found first (distributions in name order), already have.

Every backend is a :class:`BackendEntry`, listed from names alone: nothing is imported until a
backend is asked for (:func:`load`), so listing them costs one scan of the installed
distributions' entry points (:func:`importlib.metadata.entry_points`, a few milliseconds, once
per process) and ptebuild's own backends none. This module is on the bottom floor so that every
layer finds plug-ins one way: :mod:`ptebuild.backends` (the Backend objects the builder asks,
ptebuild's own and the plug-ins') and :mod:`ptebuild.runtime.payloads` (the payload readers of
the plug-ins' delegates, beside ptebuild's own readers in :mod:`ptebuild.runtime.payload_readers`).

A plug-in that cannot be used (its module fails to import, its object is missing or no backend,
its name is taken) is a :class:`~ptebuild.errors.PluginError` of one line that names its
distribution, never a traceback; the other backends are not affected. Imports neither torch nor
pydantic.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptebuild.errors import PluginError

GROUP = "ptebuild.backends"
"""The entry-point group a distribution adds backends with."""

_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class BackendEntry:
    """One backend, as found before anything is imported."""

    name: str
    """The manifest's ``backend`` value."""
    target: str
    """``module`` (its ``BACKEND``) or ``module:attribute``."""
    distribution: str | None = None
    """None for ptebuild's own; else the plug-in's distribution, as its metadata names it."""
    version: str | None = None
    """The plug-in distribution's version."""

    @property
    def plugin(self) -> bool:
        return self.distribution is not None

    def describe(self) -> str:
        """``backend 'demo' (plug-in of ptebuild-demo-backend 0.1.0)``."""
        if not self.plugin:
            return f"backend {self.name!r}"
        return f"backend {self.name!r} (plug-in of {self.distribution} {self.version})"


@dataclass(frozen=True)
class Registry:
    """The backends found, and the plug-ins that cannot be used, each in one line."""

    entries: dict[str, BackendEntry]
    problems: tuple[str, ...] = ()


_plugins: Registry | None = None
_failed: dict[str, PluginError] = {}


def plugins() -> Registry:
    """The installed plug-ins, by name, each name once (a name that is not one, or that another
    plug-in found first took, is left out with a line); found once per process."""
    global _plugins
    if _plugins is None:
        found: dict[str, BackendEntry] = {}
        problems = []
        for entry in sorted(_plugin_entries(), key=lambda e: (e.name, e.distribution or "")):
            if not _NAME.fullmatch(entry.name):
                problems.append(f"{entry.describe()}: not a backend name (lowercase letters, digits and '_', "
                                "a letter first); left out")
            elif entry.name in found:
                taken = found[entry.name]
                problems.append(f"{entry.describe()}: the name is taken by {taken.distribution} {taken.version}; left out")
            else:
                found[entry.name] = entry
        _plugins = Registry(found, tuple(problems))
    return _plugins


def registry(builtin: Mapping[str, str]) -> Registry:
    """ptebuild's own backends (``builtin``: manifest name -> module), then the installed plug-ins
    whose names they leave free."""
    found = {name: BackendEntry(name, module) for name, module in builtin.items()}
    problems = []
    for name, entry in plugins().entries.items():
        if name in found:
            problems.append(f"{entry.describe()}: the name is taken by ptebuild's own backend; left out")
        else:
            found[name] = entry
    return Registry(found, (*plugins().problems, *problems))


def _plugin_entries() -> list[BackendEntry]:
    from importlib.metadata import entry_points

    out = []
    for point in entry_points(group=GROUP):
        dist = point.dist
        name = dist.metadata["Name"] if dist is not None else None
        out.append(BackendEntry(point.name, point.value, name or "an unnamed distribution",
                                dist.version if dist is not None else "?"))
    return out




def load(entry: BackendEntry) -> Any:
    """The object ``entry`` names, from its module (imported through ``sys.modules`` on every call:
    a warm worker's child drops the modules its parent imported after its start, and a backend's
    options model must be made in the module that is current). A plug-in that fails raises
    PluginError (one line naming its distribution, also on every later call); ptebuild's own
    backends raise as they do."""
    if entry.name in _failed:
        raise _failed[entry.name]
    module_name, _, attribute = entry.target.partition(":")
    try:
        found: Any = importlib.import_module(module_name.strip())
        for part in (attribute.strip() or "BACKEND").split("."):
            found = getattr(found, part)
    except Exception as exc:
        if not entry.plugin:
            raise
        error = PluginError(f"{entry.describe()}: cannot load {entry.target}: {one_line(exc)}")
        _failed[entry.name] = error
        raise error from None
    return found


def refuse(entry: BackendEntry, why: str) -> PluginError:
    """Mark a loaded plug-in as unusable (its object is not what a backend must be): the error, kept."""
    error = PluginError(f"{entry.describe()}: {why}")
    _failed[entry.name] = error
    return error


def code_files(entry: BackendEntry) -> tuple[Path, list[Path]]:
    """``(root, files)``: the ``.py`` files of the top-level package (or module) ``entry``'s object
    lives in, and the folder they are named relative to; found without importing it (none if it
    cannot be found)."""
    import importlib.util

    top = entry.target.partition(":")[0].strip().split(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return Path(), []
    if spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations)))
        return root, sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    origin = Path(spec.origin or "")
    return origin.parent, [origin] if origin.is_file() else []


def plugin_facts(entry: BackendEntry | None, digest_file: Callable[[Path], tuple[str, int]] | None = None) -> dict[str, str]:
    """What of a plug-in backend decides a program's bytes besides ptebuild: its distribution and
    version (``backend-plugin``) and a digest of its package's code (``backend-code``,
    :func:`code_files`). Empty for ptebuild's own backends (their code is ptebuild's) and None.
    ``digest_file``: how a file is hashed (the store's stat cache)."""
    from ptebuild import own_code

    if entry is None or not entry.plugin:
        return {}
    root, files = code_files(entry)
    return {
        "backend-plugin": f"{entry.distribution} {entry.version}",
        "backend-code": own_code.digest(files, digest_file, root=root) if files else "not found",
    }


def fingerprint(digest_file: Callable[[Path], tuple[str, int]] | None = None) -> str:
    """Every installed plug-in backend, its version and code digest, in one line ("" for none):
    for identities that must change when one is installed, removed or edited."""
    return "; ".join(
        f"{name}={facts['backend-plugin']}:{facts['backend-code']}"
        for name, entry in plugins().entries.items() if (facts := plugin_facts(entry, digest_file))
    )


def one_line(exc: BaseException) -> str:
    """``TypeName: first line of the message``, at most 200 characters."""
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return line if len(line) <= 200 else line[:197] + "..."
