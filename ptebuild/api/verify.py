"""``ptebuild.verify(path)``: check a build's output folder against its record, or a release bundle
without unpacking it. Imports neither torch nor executorch."""

from __future__ import annotations

import os
from pathlib import Path

from ptebuild.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ptebuild.release.bundle import BundleReport
    from ptebuild.runtime.verify import VerifyReport


def verify(path: str | os.PathLike[str], *, verify_bytes: bool = False, runtime: str | None = None) -> VerifyReport | BundleReport:
    """The report of a folder (every file of its record present with its size and SHA-256, every
    ``.pte`` served by its ``.ptd``, every ``.bpte`` bundling its ``.pte``; ``verify_bytes``: every
    blob rehashed; a manifest ``.toml``: the folder its ``defaults.out`` names) or of a bundle (its
    entries, ``SHA256SUMS``, provenance, lock, operator list,
    then the same checks with every blob rehashed). ``runtime`` (``"1.5.1"``): each program is also
    judged against that ExecuTorch runtime; what it cannot load is a problem of the program.

    Raises ManifestError for a manifest that does not load, UsageError when the folder has no
    readable build record, the bundle cannot be read or ``runtime`` is not a version.
    """
    from ptebuild.release.bundle import is_bundle_path
    from ptebuild.runtime.compat import parse_version

    version = None
    if runtime is not None:
        version = parse_version(runtime)
        if version is None:
            raise UsageError(f"--runtime: {runtime!r} is not an ExecuTorch version; give one such as 1.5.1")
    if Path(path).suffix == ".toml" and Path(path).is_file():  # a manifest: the folder its build wrote
        from ptebuild.manifest import load_manifest

        path = load_manifest(Path(path)).out_dir()
    if is_bundle_path(path) and not Path(path).is_dir():
        from ptebuild.release.bundle import verify_bundle

        return verify_bundle(path, runtime=version)
    from ptebuild.runtime.verify import verify_folder

    return verify_folder(path, verify_bytes=verify_bytes, runtime=version)
