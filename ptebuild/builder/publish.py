"""Publishing: a target's outputs into the output folder, from where their bytes are.

A result's bytes are in the build's store (a worker wrote them there: :class:`StoreBlobs`) or
in the cache (a hit, local or fetched from a remote tier: :class:`CacheBlobs`); the
:class:`Publisher` copies what the folder lacks into its staging area (each byte hashed on the
way, :meth:`ptebuild.store.cas.CAS.restore`), renames it into place (:mod:`.outdir`) and notes
it in the build record. A program that shares a data name is held instead, until its group's
weights file is written (:mod:`.shared_data`). Nothing here imports torch or executorch.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ptebuild.builder.shared_data import SharedData
from ptebuild.errors import CorruptObject
from ptebuild.results import ActionResult, OutputFile

if TYPE_CHECKING:
    from ptebuild.builder.context import BuildContext
    from ptebuild.store.cas import CAS
    from ptebuild.store.frontend import Cache, Hit


class Blobs(Protocol):
    """Where a result's outputs can be read from."""

    def restore(self, result: ActionResult, into: dict[str, Path]) -> None:
        """Write each output named in ``into`` (file name -> new path), its bytes verified.
        Raises CorruptObject (gone or wrong) or StoreError (cannot be read or written)."""

    def path(self, output: OutputFile) -> Path | None:
        """A file holding the output's bytes as they are (read-only), if there is one."""


class StoreBlobs:
    """Outputs a worker wrote into the build's store."""

    def __init__(self, store: CAS) -> None:
        self.store = store

    def restore(self, result: ActionResult, into: dict[str, Path]) -> None:
        for name, dest in into.items():
            output = result.output(name)
            if output is None:
                raise CorruptObject(f"the result of {result.target} has no {name}; build again to store it anew")
            self.store.restore(output.sha256, dest)

    def path(self, output: OutputFile) -> Path | None:
        path = self.store.path(output.sha256)
        return path if path.is_file() else None


class CacheBlobs:
    """Outputs of a cache hit: in the local tier, or fetched from a remote one (now or when asked)."""

    def __init__(self, cache: Cache, hit: Hit) -> None:
        self.cache = cache
        self.hit = hit

    def restore(self, result: ActionResult, into: dict[str, Path]) -> None:
        self.cache.restore(self.hit, into)

    def path(self, output: OutputFile) -> Path | None:
        return None


class Publisher:
    """The output folder of a build, and its shared weights groups (see the module's docstring)."""

    def __init__(self, context: BuildContext) -> None:
        self.context = context
        self.groups = SharedData(context)

    def group_of(self, name: str) -> str | None:
        """The data name ``name`` shares with other programs, or None."""
        return self.groups.group_of(name)

    def wanted(self, name: str, found: ActionResult) -> list[str]:
        """The outputs of a remote hit this folder needs: those not in place; for a program of a
        shared-weights group its .pte only (the group's merged .ptd is fetched as one, and its
        own .ptd only if the merge must be made again)."""
        missing = [o.name for o in self.context.folder.missing(found.outputs)]
        if self.group_of(name) is not None:
            return [n for n in missing if not n.endswith(".ptd")]
        return missing

    def publish(self, name: str, result: ActionResult, blobs: Blobs) -> None:
        """Put ``result``'s outputs in the output folder (those not in place already, verified on
        the way) and note target ``name`` in the build record. A program sharing a data name is
        held until its group is complete (:meth:`finish`). Raises CorruptObject or StoreError
        when its bytes cannot be read back (nothing is published then)."""
        if self.group_of(name) is not None:
            self.groups.hold(name, result, blobs)
            return
        folder = self.context.folder
        missing = folder.missing(result.outputs)
        if missing:
            staging = folder.stage(f"{name}.publish")
            try:
                into = {o.name: staging / o.name for o in missing}
                blobs.restore(result, into)
                folder.publish(into)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        folder.record(name, result, self.context.program(name))

    def finish(self) -> None:
        """Write and publish each shared weights group whose programs all have their result."""
        self.groups.finish()
