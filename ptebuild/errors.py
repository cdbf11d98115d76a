"""The exception hierarchy of ptebuild.

The library raises these and never prints or exits; :mod:`ptebuild.cli` is the one place
that turns them into a line on stderr and an exit code.
"""

from __future__ import annotations


class PtebuildError(Exception):
    """Base of every error ptebuild raises on purpose. ``str(err)`` is a complete, one-line message."""

    exit_code = 1


class UsageError(PtebuildError):
    """The command line or an input file is wrong: the user must change something (exit 2)."""

    exit_code = 2


class ManifestError(UsageError):
    """A manifest cannot be read or fails validation. The message starts with ``file: location:``."""


class DataNameError(ManifestError):
    """A data name or program name breaks the naming rules, or two output names collide."""


class FormatError(UsageError):
    """A binary file (import library, .pte, .ptd) is malformed; the message names the file and offset."""


class BuildError(PtebuildError):
    """Lowering, serialising or checking a program failed (exit 1)."""


class CheckError(BuildError):
    """A built program disagrees with eager PyTorch beyond its tolerances."""


class StoreError(PtebuildError):
    """The cache store cannot be used."""


class CorruptObject(StoreError):
    """A stored blob's bytes do not match its digest. It is never served."""


class LoadError(PtebuildError):
    """A .pte and its .ptd files do not belong together, or cannot be loaded."""
