"""Reads a Vulkan delegate payload (``processed`` bytes in a ``.pte``) in pure Python.

ExecuTorch 1.5.1's ``VulkanBackend`` serializes a ``VkGraph``: the operators the delegate runs
on the GPU, its values (tensors with their dims and dtypes), which values are its inputs and
outputs, and its constants. Spec: executorch ``backends/vulkan/serialization/schema.fbs``
(identifier ``VK00``) and ``vulkan_graph_serialize.py``. Layout, little-endian:

=========  ============================================================================
0..4       zeros (so the magic sits where a flatbuffer's identifier would)
4..8       ``VH00``
8..10      u16 header length (30; the header is padded to 32)
10..14     u32 flatbuffer_offset      14..18  u32 flatbuffer_size
18..22     u32 bytes_offset           22..30  u64 bytes_size
=========  ============================================================================

then the flatbuffer (padded to 16), then ``bytes_size`` bytes of constants (padded to 16).
Tables read: ``VkGraph`` {0: version, 1: chain [OperatorCall], 2: values [VkValue],
3: input_ids [u32], 4: output_ids [u32], 5: constants [VkBytes]}; ``OperatorCall``
{0: node_id u32, 1: name, 2: args [i32]}; ``VkValue`` {0: value_type u8 (union ``GraphTypes``,
:data:`VALUE_TYPES`), 1: value}; ``VkTensor`` {0: datatype i8 (:data:`DTYPES`), 1: dims [u32],
2: constant_id i32, 3: mem_obj_id i32, 4: storage_type u8, 5: memory_layout u8,
6: staging_datatype i8 (127: unset, else the dtype the host side is copied as)};
``VkBytes`` {0: offset u64, 1: length u64, 2: named_key}.

A constant whose ``offset`` is ``2**64 - 1`` lives in named data under ``named_key`` (ExecuTorch
1.5.1 stores every weight so, keyed by the SHA-256 hex of its bytes: in the ``.pte``, or in a
``.ptd`` when lowered with ``external_constants_max_data_bytes``); any other constant is
``[bytes_offset + offset, + length)`` of the payload, which must lie inside it.

Imports neither torch nor executorch.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ptebuild.errors import FormatError
from ptebuild.runtime.file_region import Blob
from ptebuild.runtime.flatbuffer import U8, U32, U64, FlatbufferView, Table
from ptebuild.runtime.payloads import DelegatePayload, PayloadInfo, PayloadReader

BACKEND_ID = "VulkanBackend"
HEADER_MAGIC = b"VH00"
FLATBUFFER_IDENTIFIER = b"VK00"
# From byte 4: magic, header length, flatbuffer offset and size, constant bytes offset and size.
HEADER = struct.Struct("<4sHIIIQ")
NAMED_DATA_OFFSET = (1 << 64) - 1
VALUE_TYPES = {
    0: "None", 1: "Null", 2: "Int", 3: "Double", 4: "Bool", 5: "VkTensor", 6: "IntList", 7: "DoubleList",
    8: "BoolList", 9: "ValueList", 10: "String", 11: "SymInt",
}
"""``GraphTypes`` union tags -> table name."""
DTYPES = {0: "bool", 1: "uint8", 2: "int8", 3: "int32", 4: "float16", 5: "float32", 6: "float64", 7: "int64"}
"""``VkDataType`` -> dtype name (127 ``UNSET``)."""
UNSET_DTYPE = 127
_I8 = struct.Struct("<b")
_I32 = struct.Struct("<i")


@dataclass(frozen=True)
class VkValue:
    """One graph value; for a tensor its dtype (as the GPU holds it), the dtype the host copies it
    as (``staging_dtype``, None when the same) and its dims at the method's upper bounds."""

    kind: str
    dtype: str | None = None
    staging_dtype: str | None = None
    dims: tuple[int, ...] = ()
    constant_id: int = -1

    def describe(self) -> str:
        if self.kind != "VkTensor":
            return self.kind
        return f"{self.dtype}[{', '.join(map(str, self.dims))}]" + (f" (host {self.staging_dtype})" if self.staging_dtype else "")

    @property
    def host_dtype(self) -> str | None:
        """The dtype the runtime copies the tensor in and out as."""
        return self.staging_dtype or self.dtype


@dataclass(frozen=True)
class VkConstant:
    offset: int
    length: int
    named_key: str | None

    @property
    def in_named_data(self) -> bool:
        return self.offset == NAMED_DATA_OFFSET


@dataclass(frozen=True)
class VulkanGraph:
    """What a Vulkan payload holds."""

    version: str
    operators: tuple[str, ...]
    """The operator of each call, in order."""
    values: tuple[VkValue, ...]
    input_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    constants: tuple[VkConstant, ...]
    constant_bytes: int = 0
    operator_counts: dict[str, int] = field(default_factory=dict)

    @property
    def inputs(self) -> tuple[VkValue, ...]:
        return tuple(self.values[i] for i in self.input_ids)

    @property
    def outputs(self) -> tuple[VkValue, ...]:
        return tuple(self.values[i] for i in self.output_ids)

    @property
    def named_keys(self) -> frozenset[str]:
        """The named-data keys of its constants (found in the ``.pte`` or the ``.ptd``)."""
        return frozenset(c.named_key for c in self.constants if c.in_named_data and c.named_key)

    def summary(self) -> str:
        top = ", ".join(f"{name} {n}" for name, n in sorted(self.operator_counts.items(), key=lambda i: (-i[1], i[0]))[:6])
        more = ", ..." if len(self.operator_counts) > 6 else ""
        named = len(self.named_keys)
        return (
            f"Vulkan graph: {len(self.operators)} operator calls ({top}{more}); "
            f"inputs {', '.join(v.describe() for v in self.inputs) or '-'}; "
            f"outputs {', '.join(v.describe() for v in self.outputs) or '-'}; "
            f"{len(self.constants)} constants ({named} in named data, {self.constant_bytes} bytes inline)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "operator_calls": len(self.operators),
            "operators": dict(sorted(self.operator_counts.items())),
            "inputs": [v.describe() for v in self.inputs],
            "outputs": [v.describe() for v in self.outputs],
            "constants": len(self.constants),
            "named_keys": sorted(self.named_keys),
            "constant_bytes": self.constant_bytes,
        }


class VulkanReader(PayloadReader):
    """The Vulkan delegate's payloads (:mod:`ptebuild.runtime.payloads`)."""

    delegate_id = BACKEND_ID
    name = "Vulkan"
    describes_contents = True

    def keys(self, payload: DelegatePayload) -> frozenset[str]:
        return read_graph(payload.blob).named_keys

    def describe(self, payload: DelegatePayload) -> PayloadInfo:
        graph = read_graph(payload.blob)
        return PayloadInfo(tuple(sorted(graph.named_keys)), graph.to_json(), graph.summary())

    def operators(self, payload: DelegatePayload) -> dict[str, int]:
        return dict(read_graph(payload.blob).operator_counts)

    def weights_bytes(self, payload: DelegatePayload) -> int:
        return read_graph(payload.blob).constant_bytes


def is_vulkan_payload(head: bytes) -> bool:
    return head[4:8] == HEADER_MAGIC


def read_graph(blob: Blob) -> VulkanGraph:
    """Read the header and flatbuffer of a Vulkan payload (not its constant bytes).

    Raises FormatError if it is not one or is corrupt; messages name ``blob.source`` and offsets.
    """
    head = blob.read(0, min(blob.size, 4 + HEADER.size), "Vulkan header")
    if len(head) < 4 + HEADER.size or head[4:8] != HEADER_MAGIC:
        raise FormatError(f"{blob.source}: not a Vulkan payload: bytes 4..8 are {head[4:8]!r}, expected {HEADER_MAGIC!r}")
    _, header_size, fb_offset, fb_size, bytes_offset, bytes_size = HEADER.unpack_from(head, 4)
    if header_size < HEADER.size + 4 or fb_offset < header_size:
        raise FormatError(f"{blob.source}: bad Vulkan header: length {header_size}, flatbuffer at {fb_offset}")
    if bytes_offset + bytes_size > blob.size:
        raise FormatError(
            f"{blob.source}: truncated Vulkan payload: constants [{bytes_offset}, {bytes_offset + bytes_size}) "
            f"past its {blob.size} bytes"
        )
    buf = blob.read(fb_offset, fb_size, "Vulkan flatbuffer")
    if buf[4:8] != FLATBUFFER_IDENTIFIER:
        raise FormatError(f"{blob.source}: Vulkan flatbuffer identifier {buf[4:8]!r} at offset {fb_offset + 4}, expected {FLATBUFFER_IDENTIFIER!r}")
    graph = FlatbufferView(buf, blob.source, base=fb_offset).root("VkGraph")
    values = tuple(_value(v) for v in graph.tables(2, "values"))
    input_ids = tuple(graph.scalars(3, "input_ids", U32))
    output_ids = tuple(graph.scalars(4, "output_ids", U32))
    for i in input_ids + output_ids:
        if i >= len(values):
            raise FormatError(f"{blob.source}: corrupt: VkGraph input/output id {i}, graph has {len(values)} values")
    constants = []
    for c in graph.tables(5, "constants"):
        constant = VkConstant(c.scalar(0, "offset", U64), c.scalar(1, "length", U64), c.string(2, "named_key"))
        if not constant.in_named_data and constant.offset + constant.length > bytes_size:
            raise FormatError(
                f"{blob.source}: corrupt: {c.path} [{constant.offset}, {constant.offset + constant.length}) "
                f"lies outside the {bytes_size} constant bytes"
            )
        if constant.in_named_data and not constant.named_key:
            raise FormatError(f"{blob.source}: corrupt: {c.path} is in named data but has no named_key")
        constants.append(constant)
    operators = tuple(call.string(1, "name") or "" for call in graph.tables(1, "chain"))
    return VulkanGraph(
        version=graph.string(0, "version") or "",
        operators=operators,
        values=values,
        input_ids=input_ids,
        output_ids=output_ids,
        constants=tuple(constants),
        constant_bytes=bytes_size,
        operator_counts=dict(Counter(operators)),
    )


def _value(value: Table) -> VkValue:
    tag = value.scalar(0, "value_type", U8)
    kind = VALUE_TYPES.get(tag, f"type {tag}")
    if kind != "VkTensor":
        return VkValue(kind)
    tensor = value.table(1, "value")
    if tensor is None:
        return VkValue(kind)
    dtype = tensor.scalar(0, "datatype", _I8)
    staging = tensor.scalar(6, "staging_datatype", _I8, default=UNSET_DTYPE)
    dtype_name = DTYPES.get(dtype, f"type {dtype}")
    staging_name = None if staging == UNSET_DTYPE else DTYPES.get(staging, f"type {staging}")
    return VkValue(
        kind,
        dtype=dtype_name,
        staging_dtype=None if staging_name == dtype_name else staging_name,
        dims=tuple(tensor.scalars(1, "dims", U32)),
        constant_id=tensor.scalar(2, "constant_id", _I32),
    )


READERS: tuple[PayloadReader, ...] = (VulkanReader(),)
"""What this module reads: :data:`ptebuild.runtime.payloads.READER_MODULES` takes it, and the
backend declares it (``Backend.payload_readers``)."""
