"""``ptebuild.lock(manifest, request)``: build or restore every target, then write ``ptebuild.lock``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ptebuild.api.build import BuildReport, Progress, build, built_lock_entries
from ptebuild.api.request import BuildRequest
from ptebuild.errors import UsageError
from ptebuild.results import Status, TargetResult


@dataclass
class LockReport:
    """The build the lock was made from, and the lockfile written (None: not every target built)."""

    build: BuildReport
    path: Path | None
    targets: int = 0

    @property
    def not_built(self) -> list[TargetResult]:
        return [t for t in self.build.targets if t.status.failed or t.status is Status.SKIPPED]


def lock(manifest: str | os.PathLike[str], request: BuildRequest | None = None,
         progress: Progress | None = None) -> LockReport:
    """Build ``manifest`` (restoring what the cache has) and write ``ptebuild.lock`` beside it.

    A lock covers the whole manifest: UsageError for a request with ``only``, ``skip_backends`` or
    ``shard``; and it is written from a plain build: UsageError for ``locked`` or ``check``.
    Nothing is written unless every target was built or restored.
    """
    from ptebuild.release.lock import LOCK_NAME, write_lock

    manifest = os.fspath(manifest)
    request = request or BuildRequest()
    if request.partial:
        raise UsageError("lock: a lock covers the whole manifest; drop --only, --skip-backend and --shard")
    if request.locked or request.reproduce:
        raise UsageError("lock: a lock is written from a plain build; drop --locked and --reproduce "
                         "(run `ptebuild build --reproduce` first to see that the build is reproducible)")
    report = build(manifest, request, progress)
    result = LockReport(report, None)
    if result.not_built:
        return result
    entries = built_lock_entries(report.out_dir, report.targets)
    result.path = Path(manifest).parent / LOCK_NAME
    write_lock(result.path, entries, manifest=Path(manifest).name)
    result.targets = len(entries)
    return result
