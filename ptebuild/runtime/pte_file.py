"""Reads a ``.pte`` (ExecuTorch program) file: its header, methods, segments, named data, and the keys it needs.

Pure Python; imports neither torch nor executorch, and executes nothing.

Spec: executorch ``exir/_serialize/program.fbs`` (schema, file identifier ``ET12``) and
``exir/_serialize/_program.py`` (``_ExtendedHeader``). Layout, little-endian, offsets from
the start of the file:

====================  ==========================================================
0..4                  u32 offset of the root ``Program`` table
4..8                  file identifier ``ET12``
8..40                 optional extended header: ``eh00``, u32 header length
                      (>= 24), u64 program_size (flatbuffer bytes, header
                      included), u64 segment_base_offset, and when the length
                      is > 24, u64 segment_data_size
..program_size        rest of the flatbuffer (offsets relative to byte 0); with
                      no extended header the whole file is the flatbuffer
segment_base_offset   segment data: ``Program.segments[i]`` is
                      ``[base + offset, base + offset + size)``
====================  ==========================================================

Tables read (field index: name, type where it is a scalar):

- ``Program`` {0: version u32, 1: execution_plan, 2: constant_buffer [Buffer],
  3: backend_delegate_data, 4: segments, 5: constant_segment [SubsegmentOffsets],
  6: mutable_data_segments [SubsegmentOffsets], 7: named_data}
- ``ExecutionPlan`` {0: name, 2: values [EValue], 3: inputs [i32], 4: outputs [i32],
  5: chains [Chain], 6: operators [Operator], 7: delegates [BackendDelegate],
  8: non_const_buffer_sizes [i64], 9: non_const_buffer_device [NonConstBufferDevice]
  (since v1.3.0)}; ``NonConstBufferDevice`` {0: buffer_idx i32, 1: device_type i8
  (``DeviceType``: 0 CPU, 1 CUDA), 2: device_index i8}
- ``EValue`` {0: val_type u8 (union ``KernelTypes``, :data:`VALUE_TYPES`), 1: val}; the union's
  tables: ``Int`` {0: int_val i64}, ``Bool`` {0: bool_val u8}, ``Double`` {0: double_val f64},
  ``String`` {0: string_val}, ``IntList`` {0: items [i64]}, ``DoubleList`` {0: items [f64]},
  ``BoolList`` {0: items [u8]}, ``TensorList`` / ``OptionalTensorList`` {0: items [i32]}
- ``Tensor`` {0: scalar_type i8, 1: storage_offset i32, 2: sizes [i32], 3: dim_order [u8],
  4: requires_grad u8, 5: data_buffer_idx u32, 6: allocation_info, 7: layout i8,
  8: shape_dynamism i8, 9: extra_tensor_info}; ``AllocationDetails`` {0: memory_id u32,
  1: memory_offset_low u32, 2: memory_offset_high u32}
- ``ExtraTensorInfo`` {0: mutable_data_segments_idx u64, 1: fully_qualified_name,
  2: location u8 (1 = EXTERNAL), 3: device_type i8, 4: device_index i8 (both since v1.3.0)}
- ``Chain`` {0: inputs [i32], 1: outputs [i32], 2: instructions [Instruction]};
  ``Instruction`` {0: instr_args_type u8 (union ``InstructionArguments``,
  :data:`INSTRUCTIONS`), 1: instr_args}; ``KernelCall`` / ``DelegateCall`` {0: op_index /
  delegate_index i32, 1: args [i32]}; ``MoveCall`` / ``JumpFalseCall`` {0: move_from /
  cond_value_index i32, 1: move_to / destination_instruction i32}; ``FreeCall``
  {0: value_index i32}
- ``Operator`` {0: name, 1: overload}; ``Buffer`` {0: storage [u8]};
  ``SubsegmentOffsets`` {0: segment_index u32}
- ``BackendDelegate`` {0: id, 1: processed, 2: compile_specs [CompileSpec]};
  ``CompileSpec`` {0: key, 1: value [u8]}; ``BackendDelegateDataReference`` {0: location
  u8 (0 = INLINE in backend_delegate_data, 1 = SEGMENT), 1: index u32};
  ``BackendDelegateInlineData`` {0: data}; ``DataSegment`` {0: offset u64, 1: size u64};
  ``NamedData`` {0: key, 1: segment_index u32}

Messages name a field as this reader reads it: the union tables' fields are ``value`` (Int,
Bool, Double, String), ``index`` / ``args`` (KernelCall, DelegateCall), ``first`` / ``second``
(MoveCall, JumpFalseCall) and ``value_index`` (FreeCall).

executorch writes the extended header only when the program has segments (a portable
program whose weights are all external has none). Without it the file's expected length is
unknown, and a cut file is caught when a read runs past its end (strings must end in NUL).

Keys a program needs from a ``.ptd``:

- every EXTERNAL tensor's ``fully_qualified_name`` (the runtime resolves these in the
  external data map only: with no ``.ptd`` it fails with "external_data_map is null");
- every named-data key a delegate's payload refers to, as the payload reader its backend
  declares lists them (:mod:`.payloads`), minus the keys the ``.pte`` carries in its own
  ``named_data``. A delegate whose id no backend declares a reader for is opaque: its id is
  listed in ``opaque_delegates`` so a caller knows the key list may be incomplete.

:func:`read_pte` answers that question. For everything else (``ptebuild inspect``),
:func:`open_pte` gives a :class:`PteReader`: the checked header and
segments, and views of the tables above (:class:`ExecutionPlan`, :class:`Delegate`,
:class:`NamedData`) whose methods read their fields when called, so a caller pays only for
what it asks and meets a corrupt field as a :class:`~ptebuild.errors.FormatError` naming it.
Leaves come back as frozen values (:class:`Value`, :class:`Tensor`, :class:`Chain`...).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import BinaryIO, NamedTuple

from ptebuild.errors import FormatError
from ptebuild.runtime.file_region import Blob, file_size, read_exact, sha256_of_range
from ptebuild.runtime.flatbuffer import U8, U32, U64, FlatbufferView, Table
from ptebuild.runtime.payload_lookup import reader_for
from ptebuild.runtime.payloads import DelegatePayload

FILE_IDENTIFIER = b"ET12"
EXTENDED_HEADER_MAGIC = b"eh00"
# At byte 8: magic, header length, program size, segment base offset.
EXTENDED_HEADER = struct.Struct("<4sIQQ")
# Follows EXTENDED_HEADER when the header length says it is there.
SEGMENT_DATA_SIZE = struct.Struct("<Q")
EXTENDED_HEADER_OFFSET = 8
_IDENTIFIER_SLICE = slice(4, 8)
_HEAD_SIZE = EXTENDED_HEADER_OFFSET + EXTENDED_HEADER.size + SEGMENT_DATA_SIZE.size

_I8 = struct.Struct("<b")
_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")

#: ``KernelTypes`` union tags (``EValue.val_type``) -> the name of the union's table.
VALUE_TYPES = {
    0: "None", 1: "Null", 2: "Int", 3: "Bool", 4: "Double", 5: "Tensor", 6: "String", 7: "IntList",
    8: "DoubleList", 9: "BoolList", 10: "TensorList", 11: "OptionalTensorList",
}
#: ``InstructionArguments`` union tags (``Instruction.instr_args_type``) -> table name.
INSTRUCTIONS = {1: "KernelCall", 2: "DelegateCall", 3: "MoveCall", 4: "JumpFalseCall", 5: "FreeCall"}
# Element type of each list kind's ``items``.
_LIST_ITEMS = {"IntList": _I64, "DoubleList": _F64, "BoolList": U8, "TensorList": _I32, "OptionalTensorList": _I32}


class KernelType(IntEnum):
    """``EValue.val_type`` tags (union ``KernelTypes``) this reader cares about."""

    TENSOR = 5


class TensorDataLocation(IntEnum):
    SEGMENT = 0
    EXTERNAL = 1


class DataLocation(IntEnum):
    INLINE = 0
    SEGMENT = 1


@dataclass(frozen=True)
class PteFile:
    """What a ``.pte`` declares about its methods and named data.

    ``external_tensor_keys``: FQN keys of EXTERNAL (portable) tensors. ``delegate_keys``:
    keys the delegates' payloads refer to (:mod:`.payloads`). ``named_data_keys``: keys stored
    inside the ``.pte``. ``opaque_delegates``: ``(method, backend id)`` of delegate payloads
    whose keys no reader lists.
    """

    path: Path
    method_names: tuple[str, ...]
    external_tensor_keys: frozenset[str]
    delegate_keys: frozenset[str]
    named_data_keys: frozenset[str]
    opaque_delegates: tuple[tuple[str, str], ...]

    @property
    def required_keys(self) -> frozenset[str]:
        """Keys that must be found in the ``.ptd`` files loaded with this program."""
        return self.external_tensor_keys | (self.delegate_keys - self.named_data_keys)


@dataclass(frozen=True)
class PteHeader:
    """Bytes 0..40 of a ``.pte``, checked against the file's size.

    ``extended``: the file has the extended header (``eh00`` at byte 8). Without it
    ``program_size`` is the file's size and there is no segment data (both 0).
    """

    program_size: int
    segment_base: int
    segment_data_size: int
    extended: bool = False


class Segment(NamedTuple):
    """One ``Program.segments`` entry: ``size`` bytes at absolute file ``offset``."""

    offset: int
    size: int


@dataclass(frozen=True)
class Allocation:
    """``Tensor.allocation_info``: memory-plan id and offset (``low | high << 32``)."""

    memory_id: int
    memory_offset: int


@dataclass(frozen=True)
class ExtraTensorInfo:
    """``Tensor.extra_tensor_info``. ``location`` is a :class:`TensorDataLocation` code;
    ``device_type`` a ``DeviceType`` code (0 CPU, the default; 1 CUDA)."""

    mutable_data_segments_idx: int
    fully_qualified_name: str | None
    location: int
    device_type: int = 0
    device_index: int = 0


@dataclass(frozen=True)
class Tensor:
    """A ``Tensor`` value. ``scalar_type`` (executorch ``ScalarType``), ``layout`` and
    ``shape_dynamism`` (``TensorShapeDynamism``: 0 static, 1 bound, 2 unbound) are raw codes."""

    scalar_type: int
    storage_offset: int
    sizes: tuple[int, ...]
    dim_order: tuple[int, ...]
    requires_grad: int
    data_buffer_idx: int
    layout: int
    shape_dynamism: int
    allocation: Allocation | None
    extra: ExtraTensorInfo | None


@dataclass(frozen=True)
class Value:
    """One ``ExecutionPlan.values`` entry (an ``EValue``).

    ``kind`` names the union's table (:data:`VALUE_TYPES`; ``"type N"`` for an unknown tag);
    ``present`` is False when the union holds no table, and then nothing else is set. Set by
    kind: ``tensor`` (Tensor); ``scalar`` (Int, Bool: int; Double: float; String: str or None);
    ``items`` (IntList, BoolList: ints; DoubleList: floats; TensorList, OptionalTensorList:
    value indexes).
    """

    kind: str
    present: bool = True
    tensor: Tensor | None = None
    scalar: int | float | str | None = None
    items: tuple[int | float, ...] | None = None


@dataclass(frozen=True)
class Instruction:
    """One ``Chain.instructions`` entry.

    ``kind`` names the union's table (:data:`INSTRUCTIONS`; ``"type N"`` for an unknown tag).
    ``operands``: KernelCall / DelegateCall ``(operator or delegate index, (argument value
    indexes...))``; MoveCall / JumpFalseCall ``(first, second)``; FreeCall and unknown kinds
    ``(value_index,)``; ``()`` when the union holds no table.
    """

    kind: str
    operands: tuple[int | tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class Chain:
    """One ``ExecutionPlan.chains`` entry: value indexes in and out, and its instructions."""

    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    instructions: tuple[Instruction, ...]


@dataclass(frozen=True)
class Operator:
    """One ``ExecutionPlan.operators`` entry (absent strings read as ``""``)."""

    name: str
    overload: str


@dataclass(frozen=True)
class CompileSpec:
    """One ``BackendDelegate.compile_specs`` entry (an absent key reads as ``""``)."""

    key: str
    value: bytes


@dataclass(frozen=True)
class BufferDevice:
    """One ``ExecutionPlan.non_const_buffer_device`` entry: a planned buffer's device."""

    buffer_index: int
    device_type: int
    device_index: int


@dataclass(frozen=True)
class DataReference:
    """``BackendDelegate.processed``: a :class:`DataLocation` code and the index there
    (``backend_delegate_data`` when INLINE, ``segments`` when SEGMENT)."""

    location: int
    index: int


class Delegate:
    """A view of one ``ExecutionPlan.delegates`` entry; ``index`` is its place in the method."""

    def __init__(self, table: Table, index: int) -> None:
        self._table = table
        self.index = index

    @property
    def path(self) -> str:
        """The table's place in the file, as messages name it (``Program.execution_plan[0].delegates[1]``)."""
        return self._table.path

    def backend(self) -> str:
        """The backend id (``""`` when absent)."""
        return self._table.string(0, "id") or ""

    def processed(self, where: str) -> DataReference:
        """Where the payload lives; FormatError (``where`` leads the message) when absent."""
        return _reference(self._table, where)

    def compile_specs(self) -> list[CompileSpec]:
        return [
            CompileSpec(spec.string(0, "key") or "", spec.byte_vector(1, "value") or b"")
            for spec in self._table.tables(2, "compile_specs")
        ]


class ExecutionPlan:
    """A view of one ``Program.execution_plan`` entry (a method)."""

    def __init__(self, table: Table) -> None:
        self._table = table

    @property
    def path(self) -> str:
        return self._table.path

    def name(self) -> str:
        """The method's name (``""`` when absent)."""
        return self._table.string(0, "name") or ""

    def values(self) -> list[Value]:
        """Every value of the plan, decoded whole."""
        return [_value(value) for value in self._table.tables(2, "values")]

    def external_tensor_keys(self) -> set[str]:
        """The ``fully_qualified_name`` of every EXTERNAL tensor (reads only what says so).

        Raises FormatError for an EXTERNAL tensor without a name.
        """
        return _external_tensor_keys(self._table)

    def inputs(self) -> list[int]:
        """Value indexes of the method's inputs."""
        return self._table.scalars(3, "inputs", _I32)

    def outputs(self) -> list[int]:
        """Value indexes of the method's outputs."""
        return self._table.scalars(4, "outputs", _I32)

    def chains(self) -> list[Chain]:
        return [_chain(chain) for chain in self._table.tables(5, "chains")]

    def operators(self) -> list[Operator]:
        return [
            Operator(op.string(0, "name") or "", op.string(1, "overload") or "")
            for op in self._table.tables(6, "operators")
        ]

    def delegates(self) -> list[Delegate]:
        return [Delegate(table, index) for index, table in enumerate(self._table.tables(7, "delegates"))]

    def non_const_buffer_sizes(self) -> list[int]:
        return self._table.scalars(8, "non_const_buffer_sizes", _I64)

    def non_const_buffer_devices(self) -> list[BufferDevice]:
        """Where each planned buffer is allocated (empty for a program of CPU buffers only)."""
        return [
            BufferDevice(
                entry.scalar(0, "buffer_idx", _I32),
                entry.scalar(1, "device_type", _I8),
                entry.scalar(2, "device_index", _I8),
            )
            for entry in self._table.tables(9, "non_const_buffer_device")
        ]


class NamedData:
    """A view of one ``Program.named_data`` entry."""

    def __init__(self, table: Table) -> None:
        self._table = table

    @property
    def path(self) -> str:
        return self._table.path

    def key(self) -> str | None:
        return self._table.string(0, "key")

    def segment_index(self) -> int:
        """Index into :attr:`PteReader.segments`, as stored (not range-checked)."""
        return self._table.scalar(1, "segment_index", U32)


class PteReader:
    """A ``.pte`` open for reading: its header and segments (read and checked on creation),
    the ``Program`` flatbuffer in memory, and the file for segment bytes.

    Made by :func:`open_pte`; valid while that ``with`` block is open. Every method raises
    :class:`~ptebuild.errors.FormatError` naming the file, the field and the offset for a
    truncated or corrupt file.
    """

    def __init__(self, f: BinaryIO, source: str) -> None:
        """Reads and checks the header, the flatbuffer and ``Program.segments`` from ``f``
        (at offset 0); ``source`` names the file in messages."""
        self._f = f
        self.source = source
        self.file_size = file_size(f)
        self.header = _read_layout(f, source)
        view = FlatbufferView(read_exact(f, source, 0, self.header.program_size, "Program flatbuffer"), source)
        self._program = view.root("Program")
        self.segments: tuple[Segment, ...] = tuple(_segments(self._program, source, self.header))
        self._inline = self._program.tables(3, "backend_delegate_data")

    def version(self) -> int:
        """``Program.version``."""
        return self._program.scalar(0, "version", U32)

    def execution_plans(self) -> list[ExecutionPlan]:
        """The methods, in file order."""
        return [ExecutionPlan(table) for table in self._program.tables(1, "execution_plan")]

    def named_data(self) -> list[NamedData]:
        """The named data the ``.pte`` carries itself, in file order."""
        return [NamedData(table) for table in self._program.tables(7, "named_data")]

    def constant_buffers(self) -> Iterator[bytes]:
        """The bytes of each ``Program.constant_buffer`` entry (kept in the flatbuffer), one at a time."""
        for buffer in self._program.tables(2, "constant_buffer"):
            yield buffer.byte_vector(0, "storage") or b""

    def constant_segment_index(self) -> int | None:
        """The segment of the constant tensors (``Program.constant_segment``), None when absent."""
        constant = self._program.table(5, "constant_segment")
        return None if constant is None else constant.scalar(0, "segment_index", U32)

    def mutable_data_segment_indexes(self) -> list[int]:
        """The segment of each ``Program.mutable_data_segments`` entry."""
        return [mutable.scalar(0, "segment_index", U32) for mutable in self._program.tables(6, "mutable_data_segments")]

    @property
    def inline_data_count(self) -> int:
        """Number of ``Program.backend_delegate_data`` entries."""
        return len(self._inline)

    def inline_data(self, index: int) -> bytes:
        """The bytes of ``Program.backend_delegate_data[index]`` (IndexError when out of range)."""
        return self._inline[index].byte_vector(0, "data") or b""

    def delegate_payload(self, delegate: Delegate, where: str) -> Blob:
        """The delegate's whole payload as a :class:`Blob`, read on request (for readers that
        need its head and an index, not all of a model's weights). ``where`` leads the messages."""
        reference = _reference(delegate._table, where)
        if reference.location == DataLocation.INLINE and reference.index < len(self._inline):
            return Blob.of_bytes(self.inline_data(reference.index), where)
        if reference.location == DataLocation.SEGMENT and reference.index < len(self.segments):
            offset, size = self.segments[reference.index]
            return Blob.in_file(self._f, self.source, offset, size, where)
        raise FormatError(f"{where}: bad processed reference (location {reference.location}, index {reference.index})")

    def payload(self, method: str, delegate: Delegate) -> DelegatePayload:
        """The payload of ``delegate`` of method ``method``, as its reader takes it (:mod:`.payloads`)."""
        backend = delegate.backend()
        where = f"{self.source}: method {method!r} delegate {delegate.index} ({backend})"
        return DelegatePayload(backend, method, delegate.index, where, self.delegate_payload(delegate, where),
                               self.named_blob)

    def named_blob(self, key: str) -> Blob | None:
        """The bytes of the named data ``key`` as a :class:`Blob`, None when the ``.pte`` has no such key."""
        for named in self.named_data():
            if named.key() == key:
                index = named.segment_index()
                if index >= len(self.segments):
                    raise FormatError(f"{self.source}: {named.path} ({key!r}) points at segment {index}, file has {len(self.segments)}")
                offset, size = self.segments[index]
                return Blob.in_file(self._f, self.source, offset, size, f"{self.source}: named data {key!r}")
        return None

    def sha256_of_range(self, offset: int, size: int, what: str) -> str:
        """SHA-256 hex digest of ``size`` bytes at file ``offset``, streamed; a range past the
        end of the file is a FormatError naming ``what``."""
        return sha256_of_range(self._f, self.source, offset, size, what)

    def read(self, offset: int, size: int, what: str) -> bytes:
        """``size`` bytes at file ``offset``; a range past the end is a FormatError naming ``what``."""
        return read_exact(self._f, self.source, offset, size, what)


@contextmanager
def open_pte(path: str | Path) -> Iterator[PteReader]:
    """Opens ``path`` as a :class:`PteReader` for the ``with`` block.

    Raises:
        FormatError: not an ET12 program, or its header, flatbuffer root or segment table
            is truncated/corrupt.
        OSError: the file cannot be opened.
    """
    with open(path, "rb") as f:
        yield PteReader(f, str(path))


def read_pte(path: str | Path) -> PteFile:
    """Reads the flatbuffer (and what each delegate's payload reader needs of its payload) of a ``.pte``.

    Raises:
        FormatError: not an ET12 program, or truncated/corrupt; the message names the file,
            the field and the offset.
        OSError: the file cannot be opened.
    """
    path = Path(path)
    method_names = []
    external_keys: set[str] = set()
    delegate_keys: set[str] = set()
    opaque: list[tuple[str, str]] = []
    with open_pte(path) as pte:
        for plan in pte.execution_plans():
            name = plan.name()
            method_names.append(name)
            external_keys |= plan.external_tensor_keys()
            for delegate in plan.delegates():
                backend = delegate.backend()
                reader = reader_for(backend)
                keys = None if reader is None else reader.keys(pte.payload(name, delegate))
                if keys is None:
                    opaque.append((name, backend))
                else:
                    delegate_keys |= keys
        named_data_keys = frozenset(key for named in pte.named_data() if (key := named.key()))
    return PteFile(
        path=path,
        method_names=tuple(method_names),
        external_tensor_keys=frozenset(external_keys),
        delegate_keys=frozenset(delegate_keys),
        named_data_keys=named_data_keys,
        opaque_delegates=tuple(opaque),
    )


def _read_layout(f: BinaryIO, source: str) -> PteHeader:
    size = file_size(f)
    head = f.read(_HEAD_SIZE)
    if len(head) < EXTENDED_HEADER_OFFSET:
        raise FormatError(f"{source}: truncated: {len(head)} bytes, too short for a .pte")
    identifier = head[_IDENTIFIER_SLICE]
    if identifier != FILE_IDENTIFIER:
        raise FormatError(
            f"{source}: not a .pte file: identifier {identifier!r} at offset 4, "
            f"expected {FILE_IDENTIFIER!r} (executorch 1.5.1)"
        )
    magic = head[EXTENDED_HEADER_OFFSET : EXTENDED_HEADER_OFFSET + len(EXTENDED_HEADER_MAGIC)]
    if magic != EXTENDED_HEADER_MAGIC:
        return PteHeader(program_size=size, segment_base=0, segment_data_size=0)
    try:
        _, length, program_size, segment_base = EXTENDED_HEADER.unpack_from(
            head, EXTENDED_HEADER_OFFSET
        )
        segment_data_size = 0
        if length > EXTENDED_HEADER.size:
            (segment_data_size,) = SEGMENT_DATA_SIZE.unpack_from(
                head, EXTENDED_HEADER_OFFSET + EXTENDED_HEADER.size
            )
    except struct.error:
        raise FormatError(
            f"{source}: truncated: extended header at offset {EXTENDED_HEADER_OFFSET} is "
            f"cut off ({size} bytes in file)"
        ) from None
    if length < EXTENDED_HEADER.size:
        raise FormatError(
            f"{source}: bad extended header at offset {EXTENDED_HEADER_OFFSET}: length {length}"
        )
    if program_size > size or segment_base + segment_data_size > size:
        raise FormatError(
            f"{source}: truncated: header promises {program_size} bytes of program and "
            f"segment data up to offset {segment_base + segment_data_size}, file has {size}"
        )
    return PteHeader(program_size, segment_base, segment_data_size, extended=True)


def _segments(program: Table, source: str, layout: PteHeader) -> list[Segment]:
    """Returns ``(absolute offset, size)`` of each ``Program.segments`` entry, bounds-checked."""
    segments = []
    for segment in program.tables(4, "segments"):
        offset = segment.scalar(0, "offset", U64)
        size = segment.scalar(1, "size", U64)
        if offset + size > layout.segment_data_size:
            raise FormatError(
                f"{source}: {segment.path} [{offset}, {offset + size}) lies outside the "
                f"{layout.segment_data_size} bytes of segment data"
            )
        segments.append(Segment(layout.segment_base + offset, size))
    return segments


def _external_tensor_keys(plan: Table) -> set[str]:
    keys = set()
    for value in plan.tables(2, "values"):
        if value.scalar(0, "val_type", U8) != KernelType.TENSOR:
            continue
        tensor = value.table(1, "val")
        info = tensor.table(9, "extra_tensor_info") if tensor else None
        if info is None:
            continue
        if info.scalar(2, "location", U8) == TensorDataLocation.EXTERNAL:
            fqn = info.string(1, "fully_qualified_name")
            if not fqn:
                raise FormatError(f"{plan.view.source}: {info.path} is EXTERNAL but has no name")
            keys.add(fqn)
    return keys


def _value(evalue: Table) -> Value:
    tag = evalue.scalar(0, "val_type", U8)
    kind = VALUE_TYPES.get(tag, f"type {tag}")
    val = evalue.table(1, "val")
    if val is None:
        return Value(kind, present=False)
    if kind == "Tensor":
        return Value(kind, tensor=_tensor(val))
    if kind in ("Int", "Bool"):
        return Value(kind, scalar=val.scalar(0, "value", _I64 if kind == "Int" else U8))
    if kind == "Double":
        return Value(kind, scalar=val.float_scalar(0, "value", _F64))
    if kind == "String":
        return Value(kind, scalar=val.string(0, "value"))
    if kind in _LIST_ITEMS:
        return Value(kind, items=tuple(val.scalars(0, "items", _LIST_ITEMS[kind])))
    return Value(kind)


def _tensor(val: Table) -> Tensor:
    # Fields are read in this order (messages name the first bad one).
    scalar_type = val.scalar(0, "scalar_type", _I8)
    storage_offset = val.scalar(1, "storage_offset", _I32)
    sizes = tuple(val.scalars(2, "sizes", _I32))
    dim_order = tuple(val.scalars(3, "dim_order", U8))
    requires_grad = val.scalar(4, "requires_grad", U8)
    data_buffer_idx = val.scalar(5, "data_buffer_idx", U32)
    layout = val.scalar(7, "layout", _I8)
    shape_dynamism = val.scalar(8, "shape_dynamism", _I8)
    allocation = None
    details = val.table(6, "allocation_info")
    if details is not None:
        memory_id = details.scalar(0, "memory_id", U32)
        low = details.scalar(1, "memory_offset_low", U32)
        allocation = Allocation(memory_id, low | details.scalar(2, "memory_offset_high", U32) << 32)
    extra = None
    info = val.table(9, "extra_tensor_info")
    if info is not None:
        extra = ExtraTensorInfo(
            info.scalar(0, "mutable_data_segments_idx", U64),
            info.string(1, "fully_qualified_name"),
            info.scalar(2, "location", U8),
            info.scalar(3, "device_type", _I8),
            info.scalar(4, "device_index", _I8),
        )
    return Tensor(
        scalar_type, storage_offset, sizes, dim_order, requires_grad, data_buffer_idx, layout,
        shape_dynamism, allocation, extra,
    )


def _chain(chain: Table) -> Chain:
    instructions = tuple(_instruction(i) for i in chain.tables(2, "instructions"))
    return Chain(tuple(chain.scalars(0, "inputs", _I32)), tuple(chain.scalars(1, "outputs", _I32)), instructions)


def _instruction(instruction: Table) -> Instruction:
    tag = instruction.scalar(0, "instr_args_type", U8)
    kind = INSTRUCTIONS.get(tag, f"type {tag}")
    args = instruction.table(1, "instr_args")
    if args is None:
        return Instruction(kind)
    if kind in ("KernelCall", "DelegateCall"):
        return Instruction(kind, (args.scalar(0, "index", _I32), tuple(args.scalars(1, "args", _I32))))
    if kind in ("MoveCall", "JumpFalseCall"):
        return Instruction(kind, (args.scalar(0, "first", _I32), args.scalar(1, "second", _I32)))
    return Instruction(kind, (args.scalar(0, "value_index", _I32),))


def _reference(delegate: Table, where: str) -> DataReference:
    reference = delegate.table(1, "processed")
    if reference is None:
        raise FormatError(f"{where}: {delegate.path} has no processed data")
    return DataReference(reference.scalar(0, "location", U8), reference.scalar(1, "index", U32))
