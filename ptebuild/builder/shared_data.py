"""Shared weights files: several programs, one data name, one ``.ptd``.

Each program sharing a data name is lowered (or restored) on its own, as its own action, with
its own ``.ptd``. Once every program of the group has its result, the group's file is written:
the union of their keys, each distinct blob once (:func:`ptebuild.runtime.ptd_merge.merge_ptd`),
checked against every ``.pte`` that names it (each key present, each blob hashing to its key),
and published before the ``.pte`` files. The merge is an action of its own, keyed by the
members' ``.ptd`` digests: an unchanged group is restored, not merged again.

Nothing of a group is published unless all of its programs succeeded: a ``.ptd`` that lacked a
failed program's weights would break that program's last good ``.pte``.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ptebuild import keyinputs, own_code
from ptebuild.builder import keys
from ptebuild.errors import CorruptObject, FormatError, LoadError, StoreError
from ptebuild.results import ActionResult, OutputFile, Status

if TYPE_CHECKING:
    from ptebuild.builder.context import BuildContext

SCHEMA = "ptebuild-shared-data 1"
MERGE_ENTRY = "ptebuild.runtime.ptd_merge"
"""The merger's module: its import closure is the merge's code input."""


class MemberBlobs(Protocol):
    """Where a member's outputs are (:class:`ptebuild.builder.publish.Blobs`)."""

    def restore(self, result: ActionResult, into: dict[str, Path]) -> None: ...

    def path(self, output: OutputFile) -> Path | None: ...


@dataclass
class Member:
    """A program of a group with its result (its own outputs, before the merge), and where they are."""

    result: ActionResult
    blobs: MemberBlobs


def _output(result: ActionResult, name: str) -> OutputFile:
    """The output ``name`` of a member's result (each member writes its weights into the group's file)."""
    output = result.output(name)
    if output is None:
        raise CorruptObject(f"the result of {result.target} has no {name}; build again (ptebuild cache verify removes "
                            "broken entries)")
    return output


class SharedData:
    """The groups of a build; the publisher hands each member's result over instead of publishing it."""

    def __init__(self, context: BuildContext) -> None:
        self.context = context
        self.groups = context.plan.shared_data()
        self.of = {program: data for data, programs in self.groups.items() for program in programs}
        self.members: dict[str, dict[str, Member]] = {data: {} for data in self.groups}
        self._staging: dict[str, Path] = {}

    def group_of(self, program: str) -> str | None:
        return self.of.get(program)

    def hold(self, program: str, result: ActionResult, blobs: MemberBlobs) -> None:
        """Keep a member's result (and where its files are) until its group is complete."""
        self.members[self.of[program]][program] = Member(result, blobs)

    def _folder(self, data: str) -> Path:
        if data not in self._staging:
            self._staging[data] = self.context.folder.stage(f"{data}.shared")
        return self._staging[data]

    # -- once every program has run -------------------------------------------------------------

    def finish(self) -> None:
        for data, programs in self.groups.items():
            results = self.context.results
            present = [p for p in programs if p in results]
            if not present:
                continue
            failed = [p for p in present if results[p].status is Status.FAILED or p not in self.members[data]]
            try:
                if failed:
                    for program in present:
                        if program not in failed:
                            results[program].status = Status.SKIPPED
                            results[program].message = (
                                f"{self.context.plan.manifest}: programs.{program}: not published: "
                                f"{failed[0]!r}, which shares data name {data!r}, did not build"
                            )
                    continue
                self._complete(data, present)
            finally:
                if data in self._staging:
                    shutil.rmtree(self._staging.pop(data), ignore_errors=True)

    def _complete(self, data: str, programs: list[str]) -> None:
        context = self.context
        ptd_name = f"{data}.ptd"
        members = self.members[data]
        inputs = {"schema": SCHEMA, "shared-data": data}
        for program in programs:
            inputs[keyinputs.member(program)] = _output(members[program].result, ptd_name).sha256
        inputs[keyinputs.toolchain("merge-code")] = own_code.closure_digest([MERGE_ENTRY], context.digest_file, context.cache)
        key = keys.action_key(inputs)
        merged = self._cached(key, ptd_name, data)
        if merged is None:
            merged = self._merge(key, inputs, data, programs, self._folder(data))
            if merged is None:
                return
        to_publish: dict[str, Path] = {}
        if not context.folder.in_place(merged.outputs[0]):
            to_publish[ptd_name] = self._folder(data) / ptd_name
        for program in programs:
            member = members[program]
            for own in (o for o in member.result.outputs if o.name != ptd_name):  # its .pte (and .bpte)
                if not context.folder.in_place(own):
                    dest = self._folder(data) / own.name
                    try:
                        member.blobs.restore(member.result, {own.name: dest})
                    except (CorruptObject, StoreError) as exc:
                        self._fail(programs, f"{own.name} could not be read back: {exc}")
                        return
                    to_publish[own.name] = dest
        if to_publish:  # what is in place was checked when it was published
            paths = {n: to_publish.get(n, context.folder.path / n) for n in self._names(programs, ptd_name)}
            problem = self._check(programs, paths)
            if problem is not None:
                self._fail(programs, problem)
                return
            context.folder.publish(to_publish)
        for program in programs:
            result = members[program].result
            shared = tuple(merged.outputs[0] if o.name == ptd_name else o for o in result.outputs)
            context.results[program].outputs = shared
            context.folder.record(program, result, context.program(program), outputs=shared, shared_data=data)

    def _names(self, programs: list[str], ptd_name: str) -> list[str]:
        names = [ptd_name]
        for program in programs:
            names += [o.name for o in self.members[self.of[program]][program].result.outputs
                      if o.name.endswith(".pte") or (o.name.endswith(".ptd") and o.name != ptd_name)]
        return names

    def _cached(self, key: str, ptd_name: str, data: str) -> ActionResult | None:
        """The merged file's cached result, its file restored into the staging folder if missing here."""
        cache = self.context.cache
        if cache is None:
            return None
        lookup = cache.lookup(key)
        if lookup.hit is None:
            return None
        output = lookup.hit.result.outputs[0]
        if not self.context.folder.in_place(output):
            try:
                cache.restore(lookup.hit, {ptd_name: self._folder(data) / ptd_name})
            except (CorruptObject, StoreError):
                return None
        return lookup.hit.result

    def _merge(self, key: str, inputs: dict[str, str], data: str, programs: list[str], folder: Path) -> ActionResult | None:
        from ptebuild.hashing import hash_file
        from ptebuild.runtime.ptd_merge import merge_ptd

        context = self.context
        ptd_name = f"{data}.ptd"
        sources = []
        for program in programs:
            member = self.members[data][program]
            own = _output(member.result, ptd_name)
            path = member.blobs.path(own)  # read where it is (the store), else restored here
            if path is None:
                path = folder / program / ptd_name
                path.parent.mkdir(parents=True, exist_ok=True)
                try:
                    member.blobs.restore(member.result, {ptd_name: path})
                except (CorruptObject, StoreError) as exc:
                    self._fail(programs, f"the weights of {program!r} could not be read back from the cache: {exc}")
                    return None
            sources.append(path)
        try:
            report = merge_ptd(sources, folder / ptd_name)
        except FormatError as exc:
            self._fail(programs, f"cannot share data name {data!r}: {exc}")
            return None
        digest, size = hash_file(folder / ptd_name)
        merged = ActionResult(key=key, target=data, kind="shared-data", outputs=(OutputFile(ptd_name, digest, size),), inputs=inputs)
        if context.cache is not None:
            context.cache.save(merged, {ptd_name: folder / ptd_name})
        context.report(
            data, "progress",
            f"shared weights file {ptd_name}: {report.keys} keys of {len(programs)} programs, "
            f"{report.segments} blobs, {report.bytes_saved} bytes saved by storing equal weights once",
        )
        return merged

    def _check(self, programs: list[str], paths: dict[str, Path]) -> str | None:
        """Every ``.pte`` of the group against the shared file: keys present, bytes as named.
        Returns what is wrong, or None."""
        from ptebuild.runtime import check

        ptd = paths[f"{self.of[programs[0]]}.ptd"]
        for program in programs:
            member = self.members[self.of[program]][program]
            pte = next(o.name for o in member.result.outputs if o.name.endswith(".pte"))
            # A program's own weights files beside the shared one (a LoRA adapter's) serve it too.
            own = [paths[o.name] for o in member.result.outputs if o.name.endswith(".ptd") and paths.get(o.name) not in (None, ptd)]
            try:
                check(paths[pte], [ptd, *own], verify_bytes=True, allow_split=bool(own))
            except (LoadError, FormatError) as exc:
                return f"the shared weights file does not serve {pte}: {exc}"
        return None

    def _fail(self, programs: list[str], message: str) -> None:
        """Fail the whole group (nothing of it is published)."""
        for program in programs:
            result = self.context.results[program]
            result.status = Status.FAILED
            result.message = self.context.located(program, message)
