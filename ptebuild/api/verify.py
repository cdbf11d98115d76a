"""``ptebuild.verify(path)``: check a build's output folder against its record, or a release bundle
without unpacking it. Imports neither torch nor executorch."""

from __future__ import annotations

import os
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ptebuild.release.bundle import BundleReport
    from ptebuild.runtime.verify import VerifyReport


def verify(path: str | os.PathLike[str], *, verify_bytes: bool = False) -> VerifyReport | BundleReport:
    """The report of a folder (every file of its record present with its size and SHA-256, every
    ``.pte`` served by its ``.ptd``; ``verify_bytes``: every blob rehashed) or of a bundle (its
    entries, ``SHA256SUMS``, provenance, lock, then the same checks with every blob rehashed).

    Raises UsageError when the folder has no readable build record or the bundle cannot be read.
    """
    from ptebuild.release.bundle import is_bundle_path

    if is_bundle_path(path) and not Path(path).is_dir():
        from ptebuild.release.bundle import verify_bundle

        return verify_bundle(path)
    from ptebuild.runtime.verify import verify_folder

    return verify_folder(path, verify_bytes=verify_bytes)
