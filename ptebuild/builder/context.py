"""What every unit of one build shares: the plan, the options, the cache, the output folder, the
store the workers write into, the results, the ``--explain`` history, and the build's clock
(:class:`~.timings.Timings`: what each target did when).

A build is made of units that each own one job (:mod:`.target`: a target's life from key to
published file; :mod:`.publish`: the output folder and shared weights groups; :mod:`.schedule`:
who lowers what). They meet here, through public attributes and methods only. Nothing here
imports torch, executorch or pydantic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptebuild.builder.outdir import OutputFolder
from ptebuild.deps import DependencyCheck
from ptebuild.errors import StoreError
from ptebuild.plan import BuildPlan, ProgramPlan
from ptebuild.results import ActionResult, TargetResult

if TYPE_CHECKING:
    from ptebuild.builder.capabilities import Capabilities
    from ptebuild.store.cas import CAS
    from ptebuild.store.frontend import Cache

Report = Callable[[str, str, str], None]
"""(target name, event, text): "start", "progress", "warning", "done" events for the CLI."""


@dataclass
class BuildOptions:
    out_dir: Path | None = None
    cache: Cache | None = None
    """The cache front end, or None to build without caching."""
    jobs: int = 1
    keep_going: bool = False
    explain: bool = False
    debug: bool = False
    executor: str = "local"
    executor_options: dict[str, Any] = field(default_factory=dict)
    shard: tuple[int, int] | None = None
    """``(i, n)``: build only the programs whose action key falls in shard ``i`` of ``n`` (1-based)."""
    reproduce: bool = False
    """``--reproduce``: after the build, lower every program again, ignoring the cache, in a changed
    environment, and fail any program whose bytes differ (Nix's ``--reproduce``)."""
    timings: bool = False
    """Write the build's timeline into ``<out>/.ptebuild/`` (:mod:`.timings`)."""


class BuildContext:
    """One build's shared state (see the module's docstring)."""

    def __init__(self, plan: BuildPlan, options: BuildOptions, report: Report) -> None:
        self.plan = plan
        self.options = options
        self.report = report
        self.cache = options.cache
        self.folder = OutputFolder(plan, options.out_dir or plan.out_dir(), self.digest_file, self.cache)
        self.deps = DependencyCheck(Path(plan.manifest_dir), self.digest_file)
        self.results: dict[str, TargetResult] = {}
        """Each target's result, in manifest order (a target of another shard is dropped)."""
        self.touched: dict[str, str] = {}
        """Every file this build digested, and its SHA-256: what a no-op stamp (:mod:`.noop`) keeps."""
        self.manifest_path = str(Path(plan.manifest_dir, Path(plan.manifest).name))
        self.programs = {p.name: p for p in plan.programs}
        self.nodes_cache = self._executor_caches_on_nodes()
        """The executor's nodes look programs up in the remote cache and store them there
        themselves: this machine looks in its local tier only, and fetches what a node names."""
        self._store: CAS | None = None
        self._own_store = False
        """The store is this build's own (in the output folder's staging area), not the cache's."""
        self._capabilities: Capabilities | None = None
        from ptebuild.builder.timings import Timings

        self.timings = Timings()
        """What each target did when (written with ``--timings``; a program's expected stage times)."""

    def digest_file(self, path: Path) -> tuple[str, int]:
        """``(sha256, size)`` of a file (the cache's stat cache), noted as read by this build."""
        if self.cache is not None:
            digest = self.cache.digest_file(path)
        else:
            from ptebuild.hashing import hash_file

            digest = hash_file(path)
        self.touched[str(path)] = digest[0]
        return digest

    def _executor_caches_on_nodes(self) -> bool:
        if self.cache is None or not self.options.executor_options.get("remote_cache"):
            return False
        from ptebuild.builder.executors import executor_class

        return bool(getattr(executor_class(self.options.executor), "caches_on_nodes", False))

    # -- where outputs are ----------------------------------------------------------------------

    def store(self) -> CAS:
        """The content-addressed store this build's workers write their outputs into, and that
        the builder publishes from: the local cache's, else (no cache, or one that cannot be
        written) a store of this build in the output folder's staging area, gone with it."""
        if self._store is None:
            found = self.cache.output_store() if self.cache is not None else None
            self._own_store = found is None
            if found is None:
                from ptebuild.store.cas import CAS

                found = CAS(self.folder.stage("objects"))
            self._store = found
        return self._store

    def store_failed(self, exc: StoreError) -> bool:
        """The store could not be written (a full or read-only cache): switch the cache's local
        tier off (one warning) and use a store of this build instead. False if the store was
        this build's own already (nothing else to try)."""
        if self._store is None or self._own_store or self.cache is None:
            return False
        self.cache.local_failed(exc)
        from ptebuild.store.cas import CAS

        self._store, self._own_store = CAS(self.folder.stage("objects")), True
        return True

    # -- what this machine can do ---------------------------------------------------------------

    def capabilities(self, target: str) -> Capabilities:
        """The probe's verdicts of this toolchain (made when first asked; ``target``: whose
        progress line reports a probe)."""
        if self._capabilities is None:
            from ptebuild.builder.capabilities import Capabilities

            root = self.cache.local_root if self.cache is not None else None
            self._capabilities = Capabilities(root, self.digest_file, lambda text: self.report(target, "progress", text))
        return self._capabilities

    # -- the --explain history ------------------------------------------------------------------

    def histories(self, name: str) -> list[str]:
        """The --explain histories of a target, most precise first: per manifest (its path) and
        name, never per name alone; then per manifest file name, for a checkout moved or copied."""
        return [f"{self.manifest_path}::{name}", f"{Path(self.plan.manifest).name}::{name}"]

    def remember(self, name: str, key: str) -> None:
        if self.cache is None:
            return
        for history in self.histories(name):
            self.cache.remember(history, key)

    def last(self, name: str) -> ActionResult | None:
        if self.cache is None:
            return None
        for history in self.histories(name):
            last = self.cache.last(history)
            if last is not None:
                return last
        return None

    # -- messages -------------------------------------------------------------------------------

    def program(self, name: str) -> ProgramPlan | None:
        return self.programs.get(name)

    def located(self, name: str, message: str, location: str = "", manifest: str = "") -> str:
        """A failure as one line with the manifest and the location (program ``name``'s by default)."""
        from ptebuild.errors import BuildError

        return str(BuildError(message, manifest=manifest or self.plan.manifest, location=location or f"programs.{name}"))
