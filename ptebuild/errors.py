"""The exception hierarchy of ptebuild.

The library raises these and never prints or exits; :mod:`ptebuild.cli` is the one place
that turns them into a line on stderr and an exit code.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: the no-op build imports this module
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    _E = TypeVar("_E", bound="PtebuildError")


class PtebuildError(Exception):
    """Base of every error ptebuild raises on purpose. ``str(err)`` is a complete, one-line message.

    ``manifest`` and ``location`` (a dotted manifest path such as ``programs.policy_xnnpack``)
    are fields, not text to be parsed: code far from the manifest (a worker lowering a program)
    sets the location it knows, and the builder adds the manifest. ``str`` joins them:
    ``manifests/robot.toml: programs.policy_xnnpack: lowering for xnnpack failed: ...``.
    """

    exit_code = 1

    def __init__(self, message: str = "", *, manifest: str | None = None, location: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.manifest = manifest
        self.location = location

    def __str__(self) -> str:
        return ": ".join([part for part in (self.manifest, self.location) if part] + [self.message])

    def __reduce__(self) -> tuple[Callable[..., PtebuildError], tuple[type[PtebuildError], str, str | None, str | None]]:
        return (_rebuild, (type(self), self.message, self.manifest, self.location))


def _rebuild(cls: type[_E], message: str, manifest: str | None, location: str | None) -> _E:
    error = cls.__new__(cls)
    PtebuildError.__init__(error, message, manifest=manifest, location=location)
    return error


class UsageError(PtebuildError):
    """The command line or an input file is wrong: the user must change something (exit 2)."""

    exit_code = 2


class ManifestError(UsageError):
    """A manifest cannot be read or fails validation. The message starts with ``file: location:``."""


class DataNameError(ManifestError):
    """A data name or program name breaks the naming rules, or two output names collide."""


class PluginError(UsageError):
    """An installed plug-in (a backend from another distribution) cannot be used; the message names
    the distribution and what failed, in one line."""


class FormatError(UsageError):
    """A binary file (import library, .pte, .ptd) is malformed; the message names the file and offset."""


class BuildError(PtebuildError):
    """Lowering, serialising or checking a program failed (exit 1)."""


class StaleWorker(BuildError):
    """A long-lived worker's imported libraries are no longer what is installed: a new worker
    process must run the task (executors retry it there)."""


class CheckError(BuildError):
    """A built program disagrees with eager PyTorch beyond its tolerances."""


class StoreError(PtebuildError):
    """The cache store cannot be used."""


class CorruptObject(StoreError):
    """A stored blob's bytes do not match its digest. It is never served."""


class PackError(PtebuildError):
    """A build cannot be packed: it fails verification, or the cache lacks programs (exit 1)."""


class LoadError(PtebuildError):
    """A .pte and its .ptd files do not belong together, or cannot be loaded."""
