"""Publishing: a target's outputs into the output folder, from where their bytes are.

A result's bytes are in the build's store (a worker wrote them there: :class:`StoreBlobs`) or
in the cache (a hit, local or fetched from a remote tier: :class:`CacheBlobs`); the
:class:`Publisher` copies what the folder lacks into its staging area (each byte hashed on the
way, :meth:`ptebuild.store.cas.CAS.restore`), renames it into place (:mod:`.outdir`) and notes
it in the build record. A program that shares a data name is held instead, until its group's
weights file is written (:mod:`.shared_data`). Nothing here imports torch or executorch.

A worker says when a program's outputs are in the build's store, before its check runs
(:meth:`Publisher.copy_ahead`): they are copied into the staging area on a thread meanwhile (a
language model's gigabyte ``.ptd`` is written while it generates), and renamed into place only
when its result comes, checked; a program that fails has its copies removed.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ptebuild.builder.shared_data import SharedData
from ptebuild.errors import CorruptObject, StoreError
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


class CopiedAhead:
    """A program's outputs copied from the build's store into a staging folder on a thread,
    while its check runs: each file there whole and verified, or not at all."""

    def __init__(self, store: CAS, outputs: list[OutputFile], folder: Path) -> None:
        self.folder = folder
        self.outputs = {o.name: o for o in outputs}
        self.copied: set[str] = set()
        self.thread = threading.Thread(target=self._copy, args=(store,), name="ptebuild-copy-ahead", daemon=True)
        self.thread.start()

    def _copy(self, store: CAS) -> None:
        for output in self.outputs.values():
            try:
                store.restore(output.sha256, self.folder / output.name)
            except (CorruptObject, StoreError, OSError):
                return  # the result's own publishing copies it, and says what is wrong
            self.copied.add(output.name)

    def take(self, output: OutputFile) -> Path | None:
        """The copy of ``output`` (the same name and bytes), once written; None if there is none."""
        self.thread.join()
        ahead = self.outputs.get(output.name)
        return self.folder / output.name if ahead == output and output.name in self.copied else None

    def discard(self) -> None:
        self.thread.join()
        shutil.rmtree(self.folder, ignore_errors=True)


class Publisher:
    """The output folder of a build, and its shared weights groups (see the module's docstring)."""

    def __init__(self, context: BuildContext) -> None:
        self.context = context
        self.groups = SharedData(context)
        self._ahead: dict[str, CopiedAhead] = {}

    def copy_ahead(self, name: str, outputs: tuple[OutputFile, ...], store: CAS) -> None:
        """Target ``name``'s ``outputs`` are in ``store`` (the build's), its result still to come:
        copy those the folder lacks into the staging area meanwhile (:meth:`publish` renames them
        into place if its result names the same bytes; :meth:`discard` removes them). Nothing for
        a program of a shared-weights group (its files are merged, not published)."""
        if name in self._ahead or self.group_of(name) is not None:
            return
        missing = self.context.folder.missing(outputs)
        if missing:
            self._ahead[name] = CopiedAhead(store, missing, self.context.folder.stage(f"{name}.ahead"))

    def discard(self, name: str) -> None:
        """Remove what was copied ahead for ``name`` and not published (its task failed)."""
        ahead = self._ahead.pop(name, None)
        if ahead is not None:
            ahead.discard()

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
        ahead = self._ahead.pop(name, None)
        try:
            missing = folder.missing(result.outputs)
            if missing:
                staging = folder.stage(f"{name}.publish")
                try:
                    copied = {o.name: ahead.take(o) for o in missing} if ahead is not None else {}
                    into = {o.name: copied.get(o.name) or staging / o.name for o in missing}
                    blobs.restore(result, {n: path for n, path in into.items() if copied.get(n) is None})
                    folder.publish(into)
                finally:
                    shutil.rmtree(staging, ignore_errors=True)
        finally:
            if ahead is not None:
                ahead.discard()
        folder.record(name, result, self.context.program(name))

    def finish(self) -> None:
        """Write and publish each shared weights group whose programs all have their result."""
        self.groups.finish()
