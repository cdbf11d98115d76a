"""Reads a ``.ptd`` into a :class:`~.inspection.PtdInspection`: its header, segments and keys.

Pure Python; imports neither torch nor executorch. The file is read by :mod:`.ptd_file` (which
documents the format): every key with its size, segment and the SHA-256 of its bytes, and
every segment with the keys that share it.
"""

from __future__ import annotations

from pathlib import Path

from ptebuild.runtime.inspection import DataKey, PtdInspection, SegmentInfo
from ptebuild.runtime.ptd_file import read_ptd, read_ptd_header


def inspect_ptd(path: str | Path) -> PtdInspection:
    """Describe a ``.ptd``.

    Raises:
        FormatError: not a ``.ptd``, or truncated/corrupt; the message names the file and offset.
        OSError: the file cannot be opened.
    """
    path = Path(path)
    ptd = read_ptd(path)
    stored = read_ptd_header(path)
    digests = ptd.sha256_by_segment()
    spans = {e.segment_index: (e.offset, e.size) for e in ptd.entries.values()}
    users: dict[int, list[str]] = {}
    for entry in ptd.entries.values():
        users.setdefault(entry.segment_index, []).append(entry.key)
    header = {
        "identifier": "FT01",
        "header_length": stored.length,
        "flatbuffer_offset": stored.flatbuffer_offset,
        "flatbuffer_size": stored.flatbuffer_size,
        "segment_base_offset": stored.segment_base,
        "segment_data_size": stored.segment_data_size,
    }
    segments = tuple(
        SegmentInfo(i, spans[i][0], spans[i][1], digests[i], tuple(sorted(users[i]))) for i in sorted(spans)
    )
    keys = tuple(
        DataKey(e.key, e.size, e.segment_index, digests[e.segment_index])
        for e in sorted(ptd.entries.values(), key=lambda e: e.key)
    )
    return PtdInspection(path, stored.file_size, header, ptd.version, segments, keys)
