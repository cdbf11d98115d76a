"""Reads an XNNPACK delegate payload (``processed`` bytes in a ``.pte``): the keys it needs, what it runs.

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
Tables read: ``XNNGraph`` {1: xnodes [XNode], 8: constant_data [ConstantDataOffset]};
``XNode`` {0: xnode_union_type u8 (union ``XNodeUnion``, :data:`NODE_TYPES`)};
``ConstantDataOffset`` {0: offset u64, 1: size u64, 2: named_key string}.

Keys: ExecuTorch names each constant by the SHA-256 hex of its bytes, and the per-channel scales
of quantized weights ``scale_<64 hex>``, the digest of the scales (:meth:`XnnpackReader.key_sha256`).
The constant data after the flatbuffer can be large: only the header and the flatbuffer are read
(:func:`graph_bytes`).
"""

from __future__ import annotations

import re
import struct

from ptebuild.errors import FormatError
from ptebuild.runtime.flatbuffer import U8, FlatbufferView, Table
from ptebuild.runtime.payloads import DelegatePayload, PayloadReader

BACKEND_ID = "XnnpackBackend"
HEADER_MAGIC = b"XH00"
FLATBUFFER_IDENTIFIERS = (b"XN00", b"XN01")
# From byte 4: magic, header length, flatbuffer offset, flatbuffer size (constant data follows).
HEADER = struct.Struct("<4sHII")
# From byte 4 + HEADER.size: constant data offset and size.
CONSTANTS = struct.Struct("<IQ")
SCALE_PREFIX = "scale_"
_MAGIC_SLICE = slice(4, 8)
_NODES_FIELD = 1
_CONSTANT_DATA_FIELD = 8
_NAMED_KEY_FIELD = 2
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
NODE_TYPES = (
    "XNNAdd", "XNNFullyConnected", "XNNSoftmax", "XNNSigmoid", "XNNStaticTranspose", "XNNClamp", "XNNConv2d",
    "XNNDiv", "XNNStaticResizeBilinear2D", "XNNStaticConstantPad", "XNNAvgPooling2d", "XNNMinimum",
    "XNNDepthwiseConv2d", "XNNMaxPooling2d", "XNNMultiply", "XNNSubtract", "XNNFloor", "XNNConvert",
    "XNNGlobalAvgPooling2d", "XNNStaticReshape", "XNNArgMaxPooling2d", "XNNSquareRoot", "XNNCeiling",
    "XNNHardswish", "XNNLeakyReLU", "XNNMaximum", "XNNNegate", "XNNSquare", "XNNELU", "XNNAbs", "XNNPReLU",
    "XNNConcatenate2", "XNNConcatenate3", "XNNConcatenate4", "XNNStaticSlice", "XNNScaledDotProductAttention",
    "XNNBatchMatrixMultiply", "XNNConcatenate5", "XNNConvTranspose2d", "XNNReciprocalSquareRoot", "XNNLog",
    "XNNGelu", "XNNTanh", "XNNExp", "XNNSin", "XNNCopy", "XNNCos",
)
"""``XNodeUnion`` members in ``schema.fbs`` order (executorch 1.5.1): tag ``i + 1`` is ``NODE_TYPES[i]``."""


class XnnpackReader(PayloadReader):
    """The XNNPACK delegate's payloads (:mod:`ptebuild.runtime.payloads`)."""

    delegate_id = BACKEND_ID
    name = "XNNPACK"

    def keys(self, payload: DelegatePayload) -> frozenset[str]:
        return xnnpack_named_keys(graph_bytes(payload), payload.where)

    def operators(self, payload: DelegatePayload) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in _graph(graph_bytes(payload), payload.where).tables(_NODES_FIELD, "xnodes"):
            tag = node.scalar(0, "xnode_union_type", U8)
            name = NODE_TYPES[tag - 1] if 0 < tag <= len(NODE_TYPES) else f"type {tag}"
            counts[name] = counts.get(name, 0) + 1
        return counts

    def weights_bytes(self, payload: DelegatePayload) -> int | None:
        head = payload.head(4 + HEADER.size + CONSTANTS.size)
        if head[_MAGIC_SLICE] != HEADER_MAGIC or len(head) < 4 + HEADER.size + CONSTANTS.size:
            return None
        return int(CONSTANTS.unpack_from(head, 4 + HEADER.size)[1])

    def key_sha256(self, key: str) -> str | None:
        digest = key.removeprefix(SCALE_PREFIX)
        return digest if key.startswith(SCALE_PREFIX) and _HEX_DIGEST.fullmatch(digest) else None


def graph_bytes(payload: DelegatePayload) -> bytes:
    """The payload up to the end of its flatbuffer: the header and the flatbuffer, not the constant
    data after them (the whole payload when it has no header)."""
    size = payload.size
    head = payload.head(4 + HEADER.size)
    if head[_MAGIC_SLICE] == HEADER_MAGIC and len(head) == 4 + HEADER.size:
        _, _, offset, length = HEADER.unpack_from(head, 4)
        size = min(size, offset + length)
    return payload.read(0, size, "XNNPACK delegate blob")


def xnnpack_named_keys(blob: bytes, source: str) -> frozenset[str]:
    """Returns the named-data keys the XNNPACK blob refers to.

    ``source`` names the blob in messages, e.g. ``model.pte: forward delegate 0``.
    Raises FormatError if the blob is neither form of XNNPACK payload or is corrupt.
    """
    graph = _graph(blob, source)
    keys = set()
    for constant in graph.tables(_CONSTANT_DATA_FIELD, "constant_data"):
        key = constant.string(_NAMED_KEY_FIELD, "named_key")
        if key:
            keys.add(key)
    return frozenset(keys)


def _graph(blob: bytes, source: str) -> Table:
    """The ``XNNGraph`` table of a blob (with or without its header)."""
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
    return view.root("XNNGraph")


READERS: tuple[PayloadReader, ...] = (XnnpackReader(),)
"""What this module reads: :data:`ptebuild.runtime.payloads.READER_MODULES` takes it, and the
backend declares it (``Backend.payload_readers``)."""
