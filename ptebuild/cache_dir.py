"""Where the cache lives when no ``--cache`` is given (outside ptebuild.store: the no-op fast path
needs it without importing the store)."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir(environ: dict[str, str] | None = None) -> Path:
    """The cache folder when no ``--cache`` is given.

    ``$PTEBUILD_CACHE``, else ``$XDG_CACHE_HOME/ptebuild`` (an absolute XDG path only, as the
    XDG spec says), else ``~/.cache/ptebuild``.
    """
    env = os.environ if environ is None else environ
    explicit = env.get("PTEBUILD_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = env.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "ptebuild"
    home = env.get("HOME")
    base = Path(home) if home else Path.home()
    return base / ".cache" / "ptebuild"


def cache_folder(value: str | os.PathLike[str] | None) -> Path:
    """The cache folder a user named (else the default); UsageError if it is not a folder.
    A folder that does not exist yet is an empty cache: it is not created here."""
    from ptebuild.errors import UsageError

    root = Path(value).expanduser() if value else default_cache_dir()
    if root.exists() and not root.is_dir():
        raise UsageError(f"--cache {root}: not a folder; pass the cache folder")
    return root
