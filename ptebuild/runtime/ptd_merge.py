"""Merges the ``.ptd`` files of several programs into one shared weights file.

Each program sharing a data name is lowered on its own and gets its own ``.ptd``;
:func:`merge_ptd` writes one file holding the union of their keys:

- a key found in several sources must have the same bytes and the same tensor layout in
  each, else :class:`~ptebuild.errors.FormatError` names the key and both files;
- blobs are deduplicated by the SHA-256 of their bytes: equal bytes are stored once,
  whatever their keys (a portable constant ``<fqn>@sha256:<hex>`` and a delegate's key
  ``<hex>`` of the same weight point at one segment), each key keeping its own layout;
- the output is deterministic: keys sorted (by code point), segments in order of first use
  in that key order, executorch's default segment alignment (128). Two merges of the same
  inputs, in any order, are byte-identical;
- the output is written atomically (temporary file in the destination's folder, fsync,
  ``os.replace``) and streamed: blobs are hashed, then copied, 1 MiB at a time; only keys and
  layouts are held in memory. A blob that changes between hashing and copying fails the merge.

The alignment a program asked for a blob beyond 128 bytes is not recorded in a ``.ptd``, so it
cannot be carried over; executorch 1.5.1 writes 128 unless configured otherwise, as ptebuild does.

Imports neither torch nor executorch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptebuild.errors import FormatError
from ptebuild.runtime.ptd_file import TensorLayout, read_ptd, read_tensor_layouts
from ptebuild.runtime.ptd_write import (
    DEFAULT_SEGMENT_ALIGNMENT,
    FileSegment,
    NamedData,
    write_ptd_file,
)


@dataclass(frozen=True)
class MergeReport:
    """What :func:`merge_ptd` wrote."""

    dest: Path
    sources: tuple[Path, ...]
    keys: int
    """Keys in the merged file (the union of the sources' keys)."""
    segments: int
    """Blobs stored: one per distinct content."""
    blob_bytes: int
    """Bytes of blob data stored, without padding."""
    bytes_saved: int
    """Blob bytes not stored because another key had equal bytes: the sum over the merged
    file's keys of their blob sizes, less ``blob_bytes``."""
    source_blob_bytes: int
    """Blob bytes in all sources together (each source's segments counted once)."""
    file_size: int

    def to_json(self) -> dict[str, Any]:
        return {
            "dest": str(self.dest),
            "sources": [str(s) for s in self.sources],
            "keys": self.keys,
            "segments": self.segments,
            "blob_bytes": self.blob_bytes,
            "bytes_saved": self.bytes_saved,
            "source_blob_bytes": self.source_blob_bytes,
            "file_size": self.file_size,
        }


@dataclass(frozen=True)
class _Found:
    """Where a key's blob is: its first source, location, digest and layout."""

    source: Path
    offset: int
    size: int
    sha256: str
    layout: TensorLayout | None


def merge_ptd(sources: Sequence[Path], dest: Path) -> MergeReport:
    """Writes ``dest``: one ``.ptd`` with every key of ``sources``, each distinct blob once.

    ``dest`` may be one of the sources (it is read before being replaced).

    Raises:
        ValueError: ``sources`` is empty.
        FormatError: a source is not a valid ``.ptd``, a key has different bytes or layouts in
            two sources (the message names the key and both files), or a source changed
            while being merged.
        OSError: a source cannot be read or ``dest`` cannot be written.
    """
    sources = tuple(Path(s) for s in sources)
    dest = Path(dest)
    if not sources:
        raise ValueError(f"{dest}: nothing to merge: no source .ptd files given")
    found: dict[str, _Found] = {}
    source_blob_bytes = 0
    for source in sources:
        ptd = read_ptd(source)
        layouts = read_tensor_layouts(source)
        digests = ptd.sha256_by_segment()
        source_blob_bytes += sum({e.segment_index: e.size for e in ptd.entries.values()}.values())
        for key, entry in ptd.entries.items():
            here = _Found(source, entry.offset, entry.size, digests[entry.segment_index], layouts[key])
            _check_same(dest, key, found.setdefault(key, here), here)

    segments: list[FileSegment] = []
    segment_of: dict[str, int] = {}
    named_data = []
    for key in sorted(found):
        blob = found[key]
        index = segment_of.get(blob.sha256)
        if index is None:
            index = segment_of[blob.sha256] = len(segments)
            segments.append(FileSegment(blob.source, blob.offset, blob.size, sha256=blob.sha256))
        named_data.append(NamedData(key, index, blob.layout))
    plan = write_ptd_file(dest, segments, named_data, segment_alignment=DEFAULT_SEGMENT_ALIGNMENT)
    blob_bytes = sum(s.size for s in segments)
    return MergeReport(
        dest=dest,
        sources=sources,
        keys=len(named_data),
        segments=len(segments),
        blob_bytes=blob_bytes,
        bytes_saved=sum(b.size for b in found.values()) - blob_bytes,
        source_blob_bytes=source_blob_bytes,
        file_size=plan.file_size,
    )


def _check_same(dest: Path, key: str, first: _Found, other: _Found) -> None:
    if first is other:
        return
    if (first.size, first.sha256) != (other.size, other.sha256):
        raise FormatError(
            f"{dest}: cannot merge: key {key!r} has different bytes in {first.source} "
            f"({first.size} bytes, sha256:{first.sha256}) and {other.source} "
            f"({other.size} bytes, sha256:{other.sha256})"
        )
    if first.layout != other.layout:
        raise FormatError(
            f"{dest}: cannot merge: key {key!r} has different tensor layouts in "
            f"{first.source} ({_describe(first.layout)}) and {other.source} "
            f"({_describe(other.layout)})"
        )


def _describe(layout: TensorLayout | None) -> str:
    if layout is None:
        return "no layout"
    return (
        f"{layout.scalar_type.name} sizes {list(layout.sizes)} "
        f"dim_order {list(layout.dim_order)}"
    )
