"""Shim import libraries as build targets: written in-process (pure Python, milliseconds), into
the build's store, and published from there as a program's outputs are."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from ptebuild.builder import keys
from ptebuild.builder.target import Target
from ptebuild.errors import CorruptObject, StoreError
from ptebuild.results import ActionResult, OutputFile, Status, TargetResult

if TYPE_CHECKING:
    from ptebuild.builder.context import BuildContext
    from ptebuild.builder.publish import Publisher
    from ptebuild.plan import ShimPlan


class ShimTarget(Target):
    """One shim library of a build."""

    def __init__(self, context: BuildContext, publisher: Publisher, shim: ShimPlan) -> None:
        """Key ``shim``; its result is ``context.results[shim.name]`` (:meth:`new_result`)."""
        super().__init__(context, publisher, context.results[shim.name], keys.shim_inputs(shim, context.plan, context.digest_file))
        self.shim = shim

    @staticmethod
    def new_result(context: BuildContext, shim: ShimPlan) -> TargetResult:
        """The shim library's result, pending, noted in the build's results."""
        result = TargetResult(name=shim.name, kind="shims", backend=None, out_dir=str(context.folder.path))
        context.results[shim.name] = result
        return result

    def build(self) -> None:
        """Restore the library, or write it (into the store), store and publish it."""
        started = time.monotonic()
        if not self.restore():
            self.explain_miss()
            try:
                try:
                    action = self.write()
                except StoreError as exc:
                    if not self.context.store_failed(exc):  # a full or read-only cache: write into the build's own store
                        raise
                    action = self.write()
                self.store(action)
            except (CorruptObject, StoreError) as exc:
                self.result.status = Status.FAILED
                self.result.message = self.context.located(self.name, f"{exc}", location=f"shims.{self.name}")
        self.result.seconds = time.monotonic() - started
        self.context.report(self.name, "done", str(self.result.status))

    def write(self) -> ActionResult:
        """Write the import library into the build's store; its result."""
        from ptebuild.shims import load_shim_list, write_import_library

        shims = load_shim_list(Path(self.context.plan.manifest_dir, self.shim.source))
        data = write_import_library(shims, fmt=self.shim.format, keep_order=self.shim.keep_order)
        with self.context.store().writer() as out:
            out.write(data)
            digest, size = out.commit()
        output = OutputFile(self.shim.lib_name, digest, size)
        return ActionResult(key=self.key, target=self.name, kind="shims", outputs=(output,), inputs=self.inputs)
