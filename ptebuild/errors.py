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

    def __init__(self, message: str = "", *, manifest: str | None = None, location: str | None = None,
                 fix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.manifest = manifest
        self.location = location
        self.fix = fix
        """What to do, when ``message`` does not end with it: ``str`` adds it as the last clause.
        Set where the fix is known only above the raise (an API entry point knows that a file that
        does not parse must be rebuilt; the reader that found the bad byte does not)."""

    def __str__(self) -> str:
        return ": ".join([part for part in (self.manifest, self.location) if part] + [self.said])

    @property
    def said(self) -> str:
        """The message with its fix, without the manifest and location (what a worker sends back)."""
        return f"{self.message}; {self.fix}" if self.fix and not self.message.endswith(self.fix) else self.message

    def with_fix(self: _E, fix: str) -> _E:
        """This error, saying ``fix`` as its last clause unless it says what to do already."""
        if not self.fix:
            self.fix = fix
        return self

    def __reduce__(self) -> tuple[Callable[..., PtebuildError], tuple[type[PtebuildError], str, str | None, str | None, str]]:
        return (_rebuild, (type(self), self.message, self.manifest, self.location, self.fix))


def _rebuild(cls: type[_E], message: str, manifest: str | None, location: str | None, fix: str = "") -> _E:
    error = cls.__new__(cls)
    PtebuildError.__init__(error, message, manifest=manifest, location=location, fix=fix)
    return error


TOOLCHAIN = ("change the model where the cause points (the log has the whole output), or report it to ExecuTorch "
             "or PyTorch if the model is right")
"""The last clause of a failure of the toolchain (export, quantization, lowering) that is no known limit
(:mod:`ptebuild.lowering.known_limits`): the model is the user's, the cause the toolchain's words."""

REPORT = "this is a bug in ptebuild or its toolchain: report it with the output of the command run with --debug"
"""The last clause of an error that no input can cause (an invariant of ptebuild's or of the pinned
ExecuTorch's that did not hold): what a user can do is report it."""


DAMAGED = "it is damaged or not a file ExecuTorch wrote: build it again, or give the file the build wrote"
"""The last clause of a ``.pte``, ``.ptd`` or ``.bpte`` whose bytes do not parse, added where such a file is
read for a caller (inspect, diff, verify, load); the readers say only what is wrong and where."""


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
