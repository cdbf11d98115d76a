"""``ptebuild.inspect(path)`` and ``ptebuild.diff(a, b)``: what a ``.pte`` or ``.ptd`` holds, and
which part of two such files differs. Neither executes anything nor imports torch."""

from __future__ import annotations

import os

from ptebuild.errors import DAMAGED, FormatError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ptebuild.release.diff import BundleDiff
    from ptebuild.runtime.diff import DiffReport
    from ptebuild.runtime.inspect import PtdInspection, PteInspection


def inspect(path: str | os.PathLike[str]) -> PteInspection | PtdInspection:
    """Describe a ``.pte`` (methods, delegates, segments, the keys it needs, its figures: calls,
    size split, planned memory, and what a build record beside it recorded) or a ``.ptd`` (its
    keys). Raises UsageError if it cannot be read, FormatError if it is neither or is corrupt."""
    from ptebuild.runtime.inspect import inspect as read

    try:
        return read(path)
    except OSError as exc:
        raise UsageError(f"{os.fspath(path)}: cannot read: {exc.strerror}; give the path of a .pte or .ptd") from None
    except FormatError as exc:
        raise exc.with_fix(DAMAGED) from None


def operator_list(path: str | os.PathLike[str]) -> bytes:
    """The ``selected_operators.yaml`` of one ``.pte`` (:mod:`ptebuild.runtime.oplist`), byte for byte
    what ExecuTorch's ``gen_oplist --model_file_path <its file name>`` writes. Raises UsageError if
    it cannot be read, FormatError if it is not a ``.pte``."""
    from ptebuild.runtime.oplist import program_operators, selected_operators_yaml

    try:
        return selected_operators_yaml(program_operators(path))
    except OSError as exc:
        raise UsageError(f"{os.fspath(path)}: cannot read: {exc.strerror}; give the path of a .pte") from None
    except FormatError as exc:
        raise exc.with_fix(DAMAGED) from None


def diff(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> DiffReport | BundleDiff:
    """Which parts of two ``.pte`` (or two ``.ptd``) files differ; for two bundles (``.tar.gz``,
    ``.tgz``, ``.zip``) or two output folders, what changed program by program, with the change
    of each program's figures (:mod:`ptebuild.release.diff`)."""
    from ptebuild.release.bundle import is_bundle_path

    if is_bundle_path(a) and is_bundle_path(b):
        from ptebuild.release.diff import diff_bundles

        return diff_bundles(a, b)
    if os.path.isdir(a) and os.path.isdir(b):
        from ptebuild.release.diff import diff_folders

        return diff_folders(a, b)
    if is_bundle_path(a) or is_bundle_path(b):
        raise UsageError(f"diff: {a} and {b}: compare two bundles, or two .pte or .ptd files")
    if os.path.isdir(a) or os.path.isdir(b):
        raise UsageError(f"diff: {a} and {b}: compare two output folders, or two .pte or .ptd files")
    from ptebuild.runtime.diff import diff as compare

    try:
        return compare(a, b)
    except OSError as exc:
        raise UsageError(f"{exc.filename or a}: cannot read: {exc.strerror}; give the paths of two .pte or .ptd files") from None
    except FormatError as exc:
        raise exc.with_fix(DAMAGED) from None
