"""``ptebuild.build(manifest, request)``: build a manifest as a caller asks, and report what happened.

The steps of a build that are not the build loop itself (:mod:`ptebuild.builder.build`) live here:
the no-op stamp (:mod:`.noop`), opening the cache and its tiers, loading the plan, selecting the
targets (``only``, ``skip_backends``), choosing the executor, the lock checks before and after
(``locked``), and the report. Nothing here prints or exits: progress goes to the ``progress``
callback, problems are raised (:mod:`ptebuild.errors`) or reported in the :class:`BuildReport`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptebuild.api import noop
from ptebuild.api.request import BuildRequest, cache_root, executor_name, remote_cache, remote_secret
from ptebuild.errors import UsageError
from ptebuild.results import FailureKind, Status, TargetResult

if TYPE_CHECKING:
    from ptebuild.builder.build import Builder
    from ptebuild.plan import BuildPlan
    from ptebuild.release.lock import LockEntry
    from ptebuild.store.frontend import Cache
    from ptebuild.store.tiers import RemoteSettings, Tier

Progress = Callable[[str, str, str], None]
"""(target name, event, text): events ``start``, ``progress``, ``warning`` and ``done``."""


@dataclass
class BuildReport:
    """What a build did: one :class:`~ptebuild.results.TargetResult` per target, in manifest order."""

    manifest: str
    out_dir: Path
    seconds: float
    targets: list[TargetResult]
    lock_problems: list[str] = field(default_factory=list)
    """``locked``: each way the build differs from ``ptebuild.lock`` (empty: it matches)."""
    locked: bool = False
    shard: tuple[int, int] | None = None
    replayed: bool = False
    """True if the no-op stamp answered: nothing was looked at beyond a stat of each input."""
    timings: tuple[Path, Path] | None = None
    """``timings``: the page and the Chrome trace of the build's timeline, as written."""

    @property
    def failed(self) -> list[TargetResult]:
        return [t for t in self.targets if t.status.failed]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.lock_problems

    @property
    def manifest_error(self) -> bool:
        """True if a failure is the manifest's or the model code's to fix (the CLI exits 2)."""
        return any(t.failure is FailureKind.MANIFEST for t in self.failed)

    @property
    def skipped(self) -> bool:
        return any(t.status is Status.SKIPPED for t in self.targets)

    def to_json(self) -> dict[str, Any]:
        """The document ``ptebuild build --json`` prints: this report's fields by their names
        (``targets``, each a :meth:`TargetResult.to_json`), so the library and the command line
        speak one vocabulary."""
        document: dict[str, Any] = {
            "manifest": self.manifest,
            "out_dir": str(self.out_dir),
            "seconds": round(self.seconds, 3),
            "ok": self.ok,
            "targets": [t.to_json() for t in self.targets],
        }
        if self.shard:
            document["shard"] = f"{self.shard[0]}/{self.shard[1]}"
        if self.locked:
            document["lock_problems"] = list(self.lock_problems)
        if self.timings is not None:
            document["timings"] = {"html": str(self.timings[0]), "trace": str(self.timings[1])}
        return document

    @classmethod
    def from_json(cls, document: dict[str, Any], replayed: bool = False) -> BuildReport:
        shard = document.get("shard")
        return cls(
            manifest=document["manifest"],
            out_dir=Path(document["out_dir"]),
            seconds=float(document.get("seconds") or 0.0),
            targets=[TargetResult.from_json(p) for p in document["targets"]],
            lock_problems=list(document.get("lock_problems") or ()),
            locked="lock_problems" in document,
            shard=_shard(shard) if shard else None,
            replayed=replayed,
        )


def _shard(text: str) -> tuple[int, int]:
    """``"I/N"`` as :meth:`BuildReport.to_json` writes it -> ``(I, N)``."""
    index, _, count = text.partition("/")
    return int(index), int(count)


def open_cache(request: BuildRequest, warn: Callable[[str], None]) -> Cache | None:
    """The cache front end of a build (:class:`ptebuild.store.frontend.Cache`): the local folder,
    then the remote server if any; None with neither."""
    from ptebuild.store.frontend import Cache
    from ptebuild.store.tiers import open_remote, open_tier

    tiers: list[Tier] = []
    root = cache_root(request)
    if root is not None:
        from ptebuild.store import Store

        tiers.append(open_tier("local", Store(root)))
    settings = remote_settings(request)
    if settings is not None:
        tiers.append(open_remote(settings, warn))  # the URL's scheme picks the tier (TIER_SCHEMES)
    return Cache(tiers, warn, local_root=root) if tiers else None


def remote_settings(request: BuildRequest) -> RemoteSettings | None:
    """The build's remote cache, resolved: its headers parsed, its secret read (UsageError if one
    is unusable); None without one."""
    remote = remote_cache(request)
    if remote is None:
        return None
    from ptebuild.store.headers import headers_from
    from ptebuild.store.tiers import RemoteSettings

    return RemoteSettings.of(remote.url, headers_from(remote.headers), remote.upload is not False, remote_secret(remote))


def build(manifest: str | os.PathLike[str], request: BuildRequest | None = None, progress: Progress | None = None) -> BuildReport:
    """Build every target of ``manifest`` that ``request`` selects; return the report.

    Raises :class:`~ptebuild.errors.UsageError` (a bad request, a manifest that does not load:
    :class:`~ptebuild.errors.ManifestError`) before anything is built; a target that fails is
    reported in the report, not raised. A build that its no-op stamp answers (:mod:`.noop`) is
    replayed: the same report and progress events, nothing looked at beyond a stat of each input.
    """
    manifest = os.fspath(manifest)
    request = request or BuildRequest()
    request.validate()
    stamp = noop.stamp_for(manifest, request)
    if stamp is not None:
        started = time.monotonic()
        kept = noop.replay(stamp)
        if kept is not None:
            document, stored = kept
            for event in stored:
                if progress is not None:
                    progress(*event)
            result = BuildReport.from_json(document, replayed=True)
            result.seconds = time.monotonic() - started
            return result
    return build_stamped(manifest, request, stamp, progress)


def build_stamped(manifest: str, request: BuildRequest, stamp: Path | None, progress: Progress | None = None) -> BuildReport:
    """Build as :func:`build` does, for a caller that has decided the build's no-op stamp
    (:func:`ptebuild.api.noop.stamp_for`: ``stamp``, None for none) and found it does not answer:
    the build is not replayed, and a no-op is stamped there."""
    request.validate()
    events: list[noop.Event] = []

    def report(name: str, event: str, text: str) -> None:
        events.append((name, event, text))
        if progress is not None:
            progress(name, event, text)

    since = time.time_ns()  # what changed after (or just before) this cannot be stamped
    result, builder = _build(manifest, request, report)
    if stamp is not None and result.ok and noop.was_noop(result.targets, events):
        noop.remember(stamp, builder.looked_at(), since, result.to_json(), events)
    return result


def _build(manifest: str, request: BuildRequest, report: Progress) -> tuple[BuildReport, Builder]:
    from ptebuild.builder.build import Builder, BuildOptions
    from ptebuild.builder.plan_cache import load_plan

    started = time.monotonic()
    cache = open_cache(request, lambda text: report("", "warning", text))
    try:
        plan = select(load_plan(manifest, cache), request, manifest)
        _check_out_dir(plan, request, manifest)
        options = BuildOptions(
            out_dir=Path(request.out) if request.out else None,
            cache=cache,
            jobs=request.jobs or os.cpu_count() or 1,
            keep_going=request.keep_going,
            explain=request.explain,
            debug=request.debug,
            executor=executor_name(request, local_cache=cache is not None and cache.local_root is not None),
            executor_options=_executor_options(request, cache),
            shard=request.shard,
            reproduce=request.reproduce,
            timings=request.timings,
        )
        builder = Builder(plan, options, report)
        done = BuildReport(manifest, builder.folder, 0.0, [], locked=request.locked, shard=request.shard)
        if request.locked:
            done.lock_problems = lock_problems(manifest, static_lock_entries(builder), request.partial)
            if done.lock_problems:
                done.seconds = time.monotonic() - started
                return done, builder
        done.targets = builder.run()
        brought_along(done.targets, plan, request)
        done.timings = builder.timings_files
        if request.locked:
            done.lock_problems = lock_problems(manifest, built_lock_entries(builder.folder, done.targets),
                                               request.partial)
    finally:
        if cache is not None:
            cache.close()
    done.seconds = time.monotonic() - started
    return done, builder


def _check_out_dir(plan: BuildPlan, request: BuildRequest, manifest: str) -> None:
    """A located line for an output folder that cannot be made (a name too long, a file in the way)."""
    from ptebuild.errors import ManifestError
    from ptebuild.path_problems import describe, folder_problem

    out_dir = Path(request.out) if request.out else plan.out_dir()
    problem = folder_problem(out_dir)
    if problem is None:
        return
    if request.out:
        raise UsageError(f"--out: {describe(request.out, problem)}; pass a folder to write the outputs into")
    raise ManifestError(f"{manifest}: defaults.out: {describe(plan.out, problem)}; name a folder, relative to the manifest")


def select(plan: BuildPlan, request: BuildRequest, manifest: str) -> BuildPlan:
    """The part of ``plan`` that ``request`` asks for (``only``, ``skip_backends``)."""
    from ptebuild.backends import backend_names
    from ptebuild.manifest.typos import did_you_mean

    known = [p.name for p in plan.programs] + [s.name for s in plan.shims]
    if request.only:
        for name in request.only:
            if name not in known:
                raise UsageError(f"--only: {manifest} has no program {name!r}{did_you_mean(name, known)}; "
                                 f"name one of {', '.join(known)}")
        plan = plan.select(list(request.only))
    if request.skip_backends:
        for name in request.skip_backends:
            if name not in backend_names():
                raise UsageError(f"--skip-backend: no backend {name!r}{did_you_mean(name, backend_names())}; "
                                 f"name one of {', '.join(backend_names())}")
        plan = plan.select(
            [p.name for p in plan.programs if p.backend not in request.skip_backends] + [s.name for s in plan.shims]
        )
    return plan


def brought_along(targets: list[TargetResult], plan: BuildPlan, request: BuildRequest) -> None:
    """Say why each target that ``request.only`` did not name is in the build: it shares a data
    name with one that it named, and a shared ``.ptd`` is lowered, checked and published whole."""
    if not request.only:
        return
    asked = set(request.only)
    for name, users in plan.shared_data().items():
        named = [user for user in users if user in asked]
        for target in targets:
            if target.name in users and target.name not in asked and named:
                target.brought_along = (f"shares {name}.ptd with {', '.join(named)}; a shared weights file is "
                                        "built whole (give the programs other data names to build one alone)")


def _executor_options(request: BuildRequest, cache: Cache | None) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if cache is not None and cache.local_root is not None:
        options["cache_dir"] = cache.local_root
    if request.ray_address:
        options["address"] = request.ray_address
    settings = remote_settings(request)
    if settings is not None:
        options["remote_cache"] = settings  # an executor whose nodes use the cache opens its own tiers
    return options


# -- the lock -------------------------------------------------------------------------------------


def static_lock_entries(builder: Builder) -> dict[str, LockEntry]:
    """Each target's lock entry as this build would key it, before anything is built."""
    from ptebuild.release.lock import LockEntry

    return {
        name: LockEntry(name=name, kind=kind, key=key, backend=backend, inputs=inputs)
        for name, (kind, key, backend, inputs) in builder.static_inputs().items()
    }


def built_lock_entries(out_dir: Path, targets: list[TargetResult]) -> dict[str, LockEntry]:
    """The lock entries of the targets a build just built or restored, from its build record."""
    from ptebuild.release.lock import lock_entries_from_record
    from ptebuild.runtime.record import read_build_record

    record = read_build_record(out_dir)
    built = {t.name for t in targets}
    found = {name: entry for name, entry in (record.targets if record else {}).items() if name in built}
    return {name: entry for name, entry in lock_entries_from_record(found).items() if name in built}


def lock_problems(manifest: str, entries: dict[str, LockEntry], partial: bool) -> list[str]:
    """How ``entries`` differ from ``ptebuild.lock`` beside ``manifest`` (one line each)."""
    from ptebuild.release.lock import LOCK_NAME, check_locked

    return [f"{m}; {m.fix(manifest)}" if m.fix(manifest) else str(m)
            for m in check_locked(Path(manifest).parent / LOCK_NAME, entries, subset=partial)]
