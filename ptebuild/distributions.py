"""Installed distributions, read from their ``.dist-info`` folder names: no metadata is parsed.

One reader for every place that asks "which version of X is installed here?": the action key's
toolchain facts, the discovered dependencies, the warm server's identity and its staleness check.
Names are PEP 503 normalised (``ruamel.yaml`` -> ``ruamel-yaml``). One ``listdir`` per
``sys.path`` entry; nothing here imports torch.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass

_DIST_INFO = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+?)(?:-py[^-]*)?\.(?:dist-info|egg-info)$")


def normalize(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def path_entries(path: Iterable[str]) -> list[str]:
    """The entries of ``path`` as absolute folders, first occurrence only ("" is the working folder)."""
    seen, out = set(), []
    for entry in path:
        real = os.path.abspath(entry or ".")
        if real not in seen:
            seen.add(real)
            out.append(real)
    return out


@dataclass(frozen=True)
class InstalledDist:
    """One distribution as installed now: its version and the ``.dist-info`` folders saying so."""

    version: str
    """``"1.0"``; two in one folder (a ``pip install --target`` leaves the old one) read ``"1.0|1.1"``."""
    paths: tuple[str, ...]


def installed_dists(path: Iterable[str] | None = None) -> dict[str, InstalledDist]:
    """Normalised distribution name -> what is installed, from the dist-info folders on ``path``.

    The first entry that has a distribution wins, as for imports. No metadata file is read: one
    ``listdir`` per entry.
    """
    found: dict[str, InstalledDist] = {}
    for entry in path_entries(sys.path if path is None else path):
        try:
            names = sorted(os.listdir(entry))
        except OSError:
            continue
        here: dict[str, list[tuple[str, str]]] = {}
        for name in names:
            if name.endswith((".dist-info", ".egg-info")):
                match = _DIST_INFO.match(name)
                if match:
                    here.setdefault(normalize(match["name"]), []).append((match["version"], os.path.join(entry, name)))
        for dist, items in here.items():
            if dist not in found:
                versions = "|".join(sorted({version for version, _ in items}))
                found[dist] = InstalledDist(versions, tuple(sorted(p for _, p in items)))
    return found


def installed_versions(path: Iterable[str] | None = None) -> dict[str, str]:
    """Normalised distribution name -> version (:func:`installed_dists`), e.g. ``"1.0"`` or ``"1.0|1.1"``."""
    return {name: dist.version for name, dist in installed_dists(path).items()}


def dist_dirs(path: list[str]) -> list[str]:
    """The entries of ``path`` that hold installed distributions (site-packages, --target folders)."""
    out = []
    for entry in path:
        try:
            if any(n.endswith((".dist-info", ".egg-info")) for n in os.listdir(entry)):
                out.append(entry)
        except OSError:
            continue
    return out


def top_level_names(search: list[str]) -> dict[str, list[str]]:
    """Import name -> the distributions installed on ``search`` that provide it
    (``importlib.metadata.packages_distributions``, for a given path)."""
    from importlib import metadata

    found: dict[str, list[str]] = {}
    for dist in metadata.distributions(path=search):
        name = dist.metadata["Name"]
        if not name:
            continue
        declared = (dist.read_text("top_level.txt") or "").split()
        tops = declared or {
            f.parts[0] if len(f.parts) > 1 else f.with_suffix("").name for f in (dist.files or ()) if f.suffix == ".py"
        }
        for top in tops:
            found.setdefault(top, []).append(name)
    return found


def holding_folder(path: str, folders: list[str]) -> str | None:
    """The first of ``folders`` that ``path`` lies in, or None."""
    for folder in folders:
        if path.startswith(folder + os.sep):
            return folder
    return None


def stdlib_dirs() -> list[str]:
    """The standard library's folders."""
    import sysconfig

    paths = sysconfig.get_paths()
    return path_entries({paths["stdlib"], paths["platstdlib"]})
