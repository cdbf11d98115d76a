"""A target's life in one build: its key, the cache, its result stored and published.

:class:`Target` is what programs (:mod:`.program_target`) and shim libraries
(:mod:`.shim_targets`) share: the lookup of its key (its recorded dependencies checked, a remote
hit fetched as the output folder needs it), the restore of a hit, the store of a new result (the
cache's tiers, then the publisher), and the ``--explain`` lines. Each target reports through its
own :class:`~ptebuild.results.TargetResult`, which the build returns.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from ptebuild import keyinputs
from ptebuild.builder import keys
from ptebuild.builder.publish import Blobs, CacheBlobs, Publisher, StoreBlobs
from ptebuild.errors import REPORT, CorruptObject, StoreError
from ptebuild.results import ActionResult, Source, Status, TargetResult

if TYPE_CHECKING:
    from ptebuild.builder.context import BuildContext
    from ptebuild.store.frontend import Hit


class Target:
    """One target of a build (see the module's docstring)."""

    def __init__(self, context: BuildContext, publisher: Publisher, result: TargetResult, inputs: dict[str, str]) -> None:
        self.context = context
        self.publisher = publisher
        self.result = result
        self.inputs = inputs
        """The breakdown its key digests (:mod:`.keys`)."""
        result.key = keys.action_key(inputs)
        self.action: ActionResult | None = None
        """Its own result once built or restored (a program's own ``.ptd``, before its group merges it)."""
        self.blobs: Blobs | None = None
        """Where the bytes of :attr:`action` are."""
        self.rebuilding = False
        """A cached object of it was found corrupt or missing (warned once): it is built again."""

    @property
    def name(self) -> str:
        return self.result.name

    @property
    def key(self) -> str:
        return self.result.key

    # -- the cache ------------------------------------------------------------------------------

    def lookup(self, elsewhere: str | None = None, local_only: bool = False) -> Hit | None:
        """The cache's result for its key (or the key ``elsewhere``: without this machine's
        toolchain) whose recorded dependencies hold; a stale one explains the miss."""
        cache, deps = self.context.cache, self.context.deps
        if cache is None:
            return None
        if elsewhere is not None:
            lookup = cache.lookup(elsewhere, check=lambda r: deps.changes(r.deps, project_only=True), alias=True)
        else:
            lookup = cache.lookup(self.key, check=lambda r: deps.changes(r.deps), local_only=local_only,
                                  wanted=lambda r: self.publisher.wanted(self.name, r))
        if lookup.hit is None and lookup.stale:
            self.result.explain = lookup.stale
        return lookup.hit

    def restore(self, elsewhere: str | None = None, local_only: bool = False) -> bool:
        """Put a cached result's files in place (those missing only): True if it did.
        ``local_only``: the local tier only."""
        from ptebuild.insight.stages import Stage

        timings = self.context.timings
        start = timings.now()
        hit = self.lookup(elsewhere, local_only)
        if hit is None or not self.use(hit, elsewhere):
            return False
        timings.span(self.name, Stage.RESTORE, start)
        return True

    def use(self, hit: Hit, elsewhere: str | None = None, node: str = "") -> bool:
        """:meth:`restore` for a hit in hand; ``node``: a node of the executor built it just now
        (it is reported built, there). False if its files could not be restored."""
        cache = self.context.cache
        if cache is None:
            return False
        in_place = not self.context.folder.missing(hit.result.outputs)
        try:
            self.publisher.publish(self.name, hit.result, CacheBlobs(cache, hit))
        except CorruptObject as exc:
            if not self.rebuilding:  # a later lookup (after its lock) finds the same entry without the removed object
                said = re.sub(r"[:;] build again[^;]*$", "", str(exc))  # the advice is what happens now
                self.context.report(self.name, "warning", f"{said}; rebuilding")
                self.rebuilding = True
            return False
        except StoreError:
            return False
        result = self.result
        result.take(hit.result)
        self.action, self.blobs = hit.result, CacheBlobs(cache, hit)
        if node:
            result.status, result.node = Status.BUILT, node
        else:
            result.status = Status.CACHED
            result.cache_hit = True
            result.source = hit.source
            where = "the remote cache" if hit.source is Source.REMOTE else "the cache"
            fetched = not in_place and self.publisher.group_of(self.name) is None
            result.explain = [f"restored from {where}"] if fetched or hit.source is Source.REMOTE else ["up to date"]
        if elsewhere is not None:
            result.key, result.node = hit.result.key, hit.result.built_on
            facts = keyinputs.of_kind(hit.result.inputs, keyinputs.InputKind.TOOLCHAIN)
            toolchain = ", ".join(f"{k} {v}" for k, v in sorted(facts.items()) if "code" not in k)
            result.explain = [f"{result.explain[0]}: built on {hit.result.built_on or 'another machine'} ({toolchain})"]
        cache.count(not node)
        self.context.remember(self.name, result.key)
        return True

    def store(self, action: ActionResult) -> None:
        """Keep a new result whose bytes are in the build's store: in the cache's tiers (blobs,
        then the entry), then in the output folder (:class:`~ptebuild.builder.publish.Publisher`).
        Raises CorruptObject or StoreError if its bytes cannot be read back from the store."""
        store = self.context.store()
        cache = self.context.cache
        if cache is not None:
            aliases = (keys.elsewhere_key(action.inputs),) if action.kind == "program" else ()
            cache.save(action, {o.name: store.path(o.sha256) for o in action.outputs}, aliases)
            cache.count(False)
            self.context.remember(self.name, action.key)
        blobs = StoreBlobs(store)
        self.publisher.publish(self.name, action, blobs)
        self.result.take(action)
        self.result.status = Status.BUILT
        self.action, self.blobs = action, blobs

    def explain_miss(self, model: str = "") -> None:
        """``--explain``: what changed since the result last built or restored for this target."""
        if not self.context.options.explain or self.result.explain:
            return  # a stale dependency already says why
        last = self.context.last(self.name)
        self.result.explain = keys.explain_changes(last.inputs if last else None, self.inputs, model=model, program=self.name,
                                                   memo=self.context.cache)

    def own_file(self, name: str, folder: Path) -> Path:
        """A file of its own result (a shared-data program's own ``.ptd``, before the merge): where
        it is, or restored into ``folder``. Raises StoreError if it has none there."""
        output = self.action.output(name) if self.action is not None else None
        if output is None or self.action is None or self.blobs is None:
            raise StoreError(f"{self.name}: no {name} of its own; {REPORT}")
        path = self.blobs.path(output)
        if path is None:
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            self.blobs.restore(self.action, {name: path})
        return path
