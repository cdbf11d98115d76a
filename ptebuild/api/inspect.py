"""``ptebuild.inspect(path)`` and ``ptebuild.diff(a, b)``: what a ``.pte`` or ``.ptd`` holds, and
which part of two such files differs. Neither executes anything nor imports torch."""

from __future__ import annotations

import os

from ptebuild.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ptebuild.runtime.diff import DiffReport
    from ptebuild.runtime.inspect import PtdInspection, PteInspection


def inspect(path: str | os.PathLike[str]) -> PteInspection | PtdInspection:
    """Describe a ``.pte`` (methods, delegates, segments, the keys it needs) or a ``.ptd`` (its
    keys). Raises UsageError if it cannot be read, FormatError if it is neither or is corrupt."""
    from ptebuild.runtime.inspect import inspect as read

    try:
        return read(path)
    except OSError as exc:
        raise UsageError(f"{os.fspath(path)}: cannot read: {exc.strerror}") from None


def diff(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> DiffReport:
    """Which parts of two ``.pte`` (or two ``.ptd``) files differ."""
    from ptebuild.runtime.diff import diff as compare

    try:
        return compare(a, b)
    except OSError as exc:
        raise UsageError(f"{exc.filename or a}: cannot read: {exc.strerror}") from None
