"""The distributions a long-lived interpreter has imported, and whether they are still installed.

A warm worker server, a local worker and a Ray worker import torch, executorch and what they pull
in (torchao, numpy, sympy, tabulate...) once and keep those modules for every task after. If one
of those distributions is upgraded, downgraded or reinstalled on disk meanwhile, the process
would still lower with the old code while the discovered dependencies (:mod:`ptebuild.deps`) record the
new version: a cache entry that says one thing and holds another.

:func:`snapshot` records, for every module in ``sys.modules`` that comes from an installed
distribution, that distribution's version and the identity (device, inode, mtime) of its
``.dist-info`` folder: a ``pip install`` of another version renames the folder, and a reinstall
of the same version writes a new one. :func:`changes` compares a snapshot with the disk now (one
``listdir`` per ``sys.path`` entry and one ``stat`` per distribution: about a millisecond) and
names each difference; a process with any must not run another task.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from ptebuild.distributions import InstalledDist, dist_dirs, holding_folder, installed_dists, normalize, path_entries, top_level_names


@dataclass(frozen=True)
class ImportedDist:
    """A distribution as it was installed when this process imported it."""

    version: str
    folders: tuple[tuple[str, int, int, int], ...]
    """Each ``.dist-info`` folder's path, device, inode and modification time (ns)."""


def _folders(paths: Iterable[str]) -> tuple[tuple[str, int, int, int], ...]:
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append((path, 0, 0, 0))
            continue
        out.append((path, st.st_dev, st.st_ino, st.st_mtime_ns))
    return tuple(out)


def snapshot(modules: Iterable[str] | None = None, path: Iterable[str] | None = None) -> dict[str, ImportedDist]:
    """The distributions of the modules named (default: all of ``sys.modules``), as installed now.

    Reading which distribution provides which import name costs a scan of their metadata (about
    0.2 s): it is done only when one of the modules comes from a distribution's folder.
    """
    search = path_entries(sys.path if path is None else path)
    folders = dist_dirs(search)
    installed: dict[str, InstalledDist] | None = None
    tops: dict[str, list[str]] | None = None
    found: dict[str, ImportedDist] = {}
    names = list(sys.modules) if modules is None else list(modules)
    for name in names:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if not isinstance(file, str) or holding_folder(os.path.abspath(file), folders) is None:
            continue
        if tops is None or installed is None:  # once, and only when something came from a distribution
            tops = top_level_names(search)
            installed = installed_dists(search)
        for dist in tops.get(name.partition(".")[0], ()):
            key = normalize(dist)
            if key in installed and key not in found:
                found[key] = ImportedDist(installed[key].version, _folders(installed[key].paths))
    return found


def changes(imported: dict[str, ImportedDist], path: Iterable[str] | None = None) -> list[str]:
    """One line per imported distribution that is not installed as it was (empty: none)."""
    installed = installed_dists(sys.path if path is None else path)
    lines = []
    for name, was in sorted(imported.items()):
        now = installed.get(name)
        if now is None:
            lines.append(f"distribution {name} removed (was {was.version})")
        elif now.version != was.version:
            lines.append(f"distribution {name} changed ({was.version} -> {now.version})")
        elif _folders(now.paths) != was.folders:
            lines.append(f"distribution {name} reinstalled ({now.version})")
    return lines
