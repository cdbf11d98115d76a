"""Lists the named-data keys an XNNPACK delegate blob (``processed`` bytes in a ``.pte``) needs.

XNNPACK keeps each constant in ExecuTorch's named data store under the SHA-256 hex digest of
its bytes and records that key in the blob's ``XNNGraph.constant_data[i].named_key``; at
method load the runtime looks each one up in the ``.pte``'s named data or the ``.ptd``.

Spec: executorch ``backends/xnnpack/serialization/xnnpack_graph_serialize.py`` (``XNNHeader``)
and ``schema.fbs`` / ``runtime_schema.fbs`` (identifiers ``XN01`` / ``XN00``). Blob layout,
little-endian:

=========  ============================================================================
0..4       zeros (so the magic sits where a flatbuffer's identifier would)
4..8       ``XH00``
8..10      u16 header length (30)
10..14     u32 flatbuffer_offset      14..18  u32 flatbuffer_size
18..22     u32 constant_data_offset   22..30  u64 constant_data_size
=========  ============================================================================

A blob without the header (bytes 4..8 are ``XN00``/``XN01``) is the bare flatbuffer.
Tables read: ``XNNGraph`` {8: constant_data [ConstantDataOffset]};
``ConstantDataOffset`` {0: offset u64, 1: size u64, 2: named_key string}.
"""

from __future__ import annotations

import struct

from ptebuild.errors import FormatError
from ptebuild.runtime._flatbuffer import FlatbufferView

BACKEND_ID = "XnnpackBackend"
HEADER_MAGIC = b"XH00"
FLATBUFFER_IDENTIFIERS = (b"XN00", b"XN01")
# From byte 4: magic, header length, flatbuffer offset, flatbuffer size (constant data follows).
HEADER = struct.Struct("<4sHII")
_MAGIC_SLICE = slice(4, 8)
_CONSTANT_DATA_FIELD = 8
_NAMED_KEY_FIELD = 2


def xnnpack_named_keys(blob: bytes, source: str) -> frozenset[str]:
    """Returns the named-data keys the XNNPACK blob refers to.

    ``source`` names the blob in messages, e.g. ``model.pte: forward delegate 0``.
    Raises FormatError if the blob is neither form of XNNPACK payload or is corrupt.
    """
    magic = blob[_MAGIC_SLICE]
    if magic == HEADER_MAGIC:
        if len(blob) < 4 + HEADER.size:
            raise FormatError(f"{source}: truncated XNNPACK header ({len(blob)} bytes)")
        _, _, offset, size = HEADER.unpack_from(blob, 4)
        if offset + size > len(blob):
            raise FormatError(
                f"{source}: XNNPACK flatbuffer [{offset}, {offset + size}) runs past the "
                f"{len(blob)}-byte blob"
            )
        view = FlatbufferView(blob[offset : offset + size], source, base=offset)
    elif magic in FLATBUFFER_IDENTIFIERS:
        view = FlatbufferView(blob, source)
    else:
        raise FormatError(f"{source}: not an XNNPACK blob (bytes 4..8 are {magic!r})")
    graph = view.root("XNNGraph")
    keys = set()
    for constant in graph.tables(_CONSTANT_DATA_FIELD, "constant_data"):
        key = constant.string(_NAMED_KEY_FIELD, "named_key")
        if key:
            keys.add(key)
    return frozenset(keys)
