"""Discovered dependencies: what a lowering really used, recorded like ninja's depfiles.

An action key covers the static inputs of a program (its manifest entries, the factory's package,
the weights, the toolchain). Model code reaches further: a sibling package next to the manifest
(``from layers.blocks import activation``), or an installed library (transformers, timm,
torchao). After a worker has built, exported, lowered and checked a program, :func:`discover`
walks ``sys.modules`` and maps every module that has a file to either

- a **source file** (anything outside the stdlib and outside installed distributions), named
  relative to the ``sys.path`` entry it was imported from (the manifest's folder comes first), and
  hashed with SHA-256; or
- an **installed distribution** (through ``importlib.metadata.packages_distributions``), with its
  version read from its ``<name>-<version>.dist-info`` folder name.

The result is stored with the action result. The next build finds the result by its static key
and calls :meth:`DependencyCheck.changes`: every source file is digested again through the
stat cache (no read of an unchanged file) and every distribution's version is read from the
folder names of the ``sys.path`` entries (one ``listdir`` each per build, no
``importlib.metadata``, no torch). Any difference is a miss, and the lines it returns name it
for ``--explain``: ``source file layers/blocks.py changed``,
``distribution transformers changed (5.23.0 -> 5.24.0)``.

ptebuild's own modules are left out (their lowering code is in the key already); so are the
stdlib and modules without a file (builtins, namespace packages).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptebuild.distributions import (
    dist_dirs,
    holding_folder,
    installed_versions,
    normalize,
    path_entries,
    stdlib_dirs,
    top_level_names,
)


@dataclass(frozen=True)
class Dependencies:
    """What a lowering was found to use, beyond the static inputs of its key.

    ``sources``: source file name (relative to the ``sys.path`` entry it was imported from, or
    to the manifest's folder, ``/``-separated) -> SHA-256. ``dists``: installed distribution
    (normalised name) -> version.
    """

    sources: tuple[tuple[str, str], ...] = ()
    dists: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, dict[str, str]]:
        return {"sources": dict(self.sources), "dists": dict(self.dists)}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Dependencies:
        data = data or {}
        sources = data.get("sources") or {}
        dists = data.get("dists") or {}
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in {**sources, **dists}.items()):
            raise TypeError("dependencies must map names to strings")
        return cls(tuple(sorted(sources.items())), tuple(sorted(dists.items())))


DigestFile = Callable[[Path], tuple[str, int]]

_NOT_DEPENDENCIES = frozenset({"ptebuild", "__main__", "__mp_main__"})
"""ptebuild itself (its lowering code is in the key) and the entry script."""



STARTUP_PATH = tuple(sys.path)
"""``sys.path`` when this module was first imported: before torch and friends added their own
entries (``pkg_resources`` puts setuptools' vendored packages on it). Dependencies are named
against it, as the builder's process, which never imports them, will look them up."""


def discover(
    manifest_dir: Path, hash_file: Callable[[Path], tuple[str, int]], path: Iterable[str] | None = None
) -> Dependencies:
    """What the modules in ``sys.modules`` say this process used (run in a worker, after the work).

    ``path``: where distributions and source files are named from (default: :data:`STARTUP_PATH`).
    A module found only through an entry added later (a vendored package) is hashed as a source
    file, named relative to the entry of ``path`` that holds it.
    """
    search = path_entries([str(manifest_dir), *list(STARTUP_PATH if path is None else path)])
    folders = dist_dirs(search)
    stdlib = stdlib_dirs()
    top_to_dists = top_level_names(search)
    versions = installed_versions(search)
    sources: dict[str, str] = {}
    dists: dict[str, str] = {}
    for name, module in list(sys.modules.items()):
        top = name.partition(".")[0]
        if top in sys.stdlib_module_names or top in _NOT_DEPENDENCIES or top.startswith("__editable__"):
            continue
        file = getattr(module, "__file__", None)
        if not isinstance(file, str) or not os.path.isfile(file):
            continue
        file = os.path.abspath(file)
        if holding_folder(file, stdlib) and not holding_folder(file, folders):
            continue
        dist_dir = holding_folder(file, folders)
        if dist_dir is not None and dist_dir != os.path.abspath(manifest_dir):
            found = [normalize(d) for d in top_to_dists.get(top, ()) if normalize(d) in versions]
            for dist in found:
                dists[dist] = versions[dist]
            if found:
                continue
        sources[source_name(file, search)] = hash_file(Path(file))[0]
    return Dependencies(tuple(sorted(sources.items())), tuple(sorted(dists.items())))


def source_name(file: str, search: list[str]) -> str:
    """``file`` relative to the search-path entry holding it (``/``-separated), else absolute.

    The manifest's folder wins when it holds the file; otherwise the deepest entry does (a
    site-packages folder rather than a working directory that happens to contain it).
    """
    holding = [folder for folder in search if file.startswith(folder + os.sep)]
    if not holding:
        return Path(file).as_posix()
    folder = holding[0] if holding[0] == search[0] else max(holding, key=len)
    return Path(os.path.relpath(file, folder)).as_posix()


class DependencyCheck:
    """Checks recorded dependencies against this machine, now. One per build (it caches)."""

    def __init__(self, manifest_dir: Path, digest_file: DigestFile, path: Iterable[str] | None = None) -> None:
        self.search = path_entries([str(manifest_dir), *list(sys.path if path is None else path)])
        self.digest_file = digest_file
        self._versions: dict[str, str] | None = None
        self._paths: dict[str, Path | None] = {}

    def versions(self) -> dict[str, str]:
        if self._versions is None:
            self._versions = installed_versions(self.search)
        return self._versions

    def _resolve(self, name: str) -> Path | None:
        if name not in self._paths:
            found = None
            if os.path.isabs(name):
                found = Path(name) if os.path.isfile(name) else None
            else:
                for entry in self.search:
                    candidate = os.path.join(entry, name)
                    if os.path.isfile(candidate):
                        found = Path(candidate)
                        break
            self._paths[name] = found
        return self._paths[name]

    def changes(self, deps: Dependencies, project_only: bool = False) -> list[str]:
        """What differs between ``deps`` and this machine: one line each (empty: nothing).

        ``project_only``: for a result another kind of machine built, only the sources of the
        project (next to the manifest) are compared; its installed software is its own.
        """
        lines = []
        for name, digest in deps.sources:
            if project_only and not os.path.isfile(os.path.join(self.search[0], name)):
                continue
            path = self._resolve(name)
            if path is None:
                lines.append(f"source file {name} removed")
                continue
            try:
                now = self.digest_file(path)[0]
            except OSError:
                lines.append(f"source file {name} unreadable")
                continue
            if now != digest:
                lines.append(f"source file {name} changed")
        versions = self.versions()
        for dist, version in () if project_only else deps.dists:
            installed = versions.get(dist)
            if installed is None:
                lines.append(f"distribution {dist} removed (was {version})")
            elif installed != version:
                lines.append(f"distribution {dist} changed ({version} -> {installed})")
        return lines
