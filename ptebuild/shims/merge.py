"""Three-way merge of shim lists, as a git merge driver needs it for ``.lib`` files.

Per export name, comparing whole exports (type, ordinal, NONAME, PRIVATE): unchanged on one side
takes the other side's version (addition, removal or change); the same version on both sides is
kept; two different versions (or a change on one side and a removal on the other) are a conflict.
The DLL name merges the same way. The result is canonical (sorted, de-duplicated).
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from ptebuild.shims.model import Export, ShimList

_V = TypeVar("_V")


@dataclasses.dataclass(frozen=True)
class MergeResult:
    shims: ShimList
    conflicts: tuple[str, ...]  # one line each; empty when the merge is clean


def _describe(export: Export | None) -> str:
    return "removed" if export is None else export.describe()


def _merge_one(base: _V, ours: _V, theirs: _V) -> tuple[_V, bool]:
    """(merged value, conflicted?) for one three-way slot."""
    if ours == theirs:
        return ours, False
    if ours == base:
        return theirs, False
    if theirs == base:
        return ours, False
    return ours, True


def merge_shim_lists(base: ShimList, ours: ShimList, theirs: ShimList) -> MergeResult:
    """Merge ``ours`` and ``theirs``, both derived from ``base``. Conflicts keep our side."""
    base_map, our_map, their_map = ({e.name: e for e in s.canonical().exports} for s in (base, ours, theirs))
    conflicts = []
    dll, conflicted = _merge_one(base.dll, ours.dll, theirs.dll)
    if conflicted:
        conflicts.append(f"DLL name: ours {ours.dll}, theirs {theirs.dll}; pick one")
    merged = []
    for name in sorted(base_map.keys() | our_map.keys() | their_map.keys()):
        value, conflicted = _merge_one(base_map.get(name), our_map.get(name), their_map.get(name))
        if conflicted:
            conflicts.append(
                f"export {name}: ours {_describe(our_map.get(name))}, theirs {_describe(their_map.get(name))}; "
                "edit the shim list to say which"
            )
        if value is not None:
            merged.append(value)
    return MergeResult(ShimList(dll, tuple(merged)).canonical(), tuple(conflicts))
