"""What a ``.pte`` or ``.ptd`` holds, part by part: for ``ptebuild inspect`` and :mod:`.diff`.

Pure Python, like the readers it builds on (:mod:`.pte_file`, :mod:`.ptd_file`); imports
neither torch nor executorch. A ``.pte`` is described as:

- its header: identifier, extended header (program size, segment base and data size);
- each method (``ExecutionPlan``): inputs and outputs as the flatbuffer types them (a tensor's
  dtype, sizes at the example size, shape dynamism), operators, delegates (backend, where the
  payload lives, its size and SHA-256, the named-data keys an XNNPACK payload needs), and a
  digest of the plan itself (values, chains, instructions, operators, delegate specs; not the
  payloads) so that two plans compare with one string;
- its segments (offset, size, SHA-256, what uses each), its named data (key, size), the
  constant buffers, and the keys it needs from a ``.ptd``.

A ``.ptd`` is described by its header, its segments and its keys (size, segment, SHA-256).
Schema field numbers: executorch ``exir/_serialize/program.fbs`` (1.5.1).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ptebuild.errors import FormatError
from ptebuild.runtime._file_region import file_size, read_exact, sha256_of_range
from ptebuild.runtime._flatbuffer import U8, U32, U64, FlatbufferView, Table

I8 = struct.Struct("<b")
I32 = struct.Struct("<i")
I64 = struct.Struct("<q")
F64 = struct.Struct("<d")

#: executorch ``ScalarType`` (scalar_type.fbs) -> torch-style dtype name.
DTYPES = {
    0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
    7: "float64", 11: "bool", 12: "qint8", 13: "quint8", 14: "qint32", 15: "bfloat16",
    16: "quint4x2", 17: "quint2x4", 22: "bits16", 23: "float8_e5m2", 24: "float8_e4m3fn",
    25: "float8_e5m2fnuz", 26: "float8_e4m3fnuz", 27: "uint16", 28: "uint32", 29: "uint64",
}
#: ``KernelTypes`` union tags.
VALUE_TYPES = {
    0: "None", 1: "Null", 2: "Int", 3: "Bool", 4: "Double", 5: "Tensor", 6: "String", 7: "IntList",
    8: "DoubleList", 9: "BoolList", 10: "TensorList", 11: "OptionalTensorList",
}
#: ``InstructionArguments`` union tags.
INSTRUCTIONS = {1: "KernelCall", 2: "DelegateCall", 3: "MoveCall", 4: "JumpFalseCall", 5: "FreeCall"}
DYNAMISM = {0: "static", 1: "dynamic-bound", 2: "dynamic-unbound"}


@dataclass(frozen=True)
class ValueSpec:
    """A method input or output: its EValue index and type; for a tensor its dtype, sizes, dynamism."""

    index: int
    type: str
    dtype: str | None = None
    sizes: tuple[int, ...] | None = None
    dynamism: str | None = None

    def describe(self) -> str:
        if self.type != "Tensor":
            return self.type
        return f"{self.dtype}[{', '.join(map(str, self.sizes or ()))}]" + (
            f" ({self.dynamism})" if self.dynamism and self.dynamism != "static" else ""
        )


@dataclass(frozen=True)
class DelegateInfo:
    """One delegate of a method and its payload (``location`` inline or segment ``data_index``)."""

    index: int
    backend: str
    location: str
    data_index: int
    offset: int | None
    """File offset of the payload (None: inline data of unknown position)."""
    size: int
    sha256: str
    compile_specs: tuple[str, ...] = ()
    keys: tuple[str, ...] | None = None
    """Named-data keys the payload needs (None: this reader cannot list them)."""


@dataclass(frozen=True)
class MethodInfo:
    name: str
    inputs: tuple[ValueSpec, ...]
    outputs: tuple[ValueSpec, ...]
    operators: tuple[str, ...]
    delegates: tuple[DelegateInfo, ...]
    values: int
    instructions: int
    plan_sha256: str
    """Digest of the plan (values, chains, operators, delegate ids and specs); payloads excluded."""
    plan_parts: dict[str, str] = field(default_factory=dict, compare=False)
    """Digest of each part of the plan (values, chains, operators, inputs, outputs, delegates)."""


@dataclass(frozen=True)
class SegmentInfo:
    index: int
    offset: int
    size: int
    sha256: str
    used_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class DataKey:
    key: str
    size: int
    segment: int
    sha256: str


@dataclass(frozen=True)
class PteInspection:
    path: Path
    size: int
    header: dict[str, Any]
    version: int
    methods: tuple[MethodInfo, ...]
    segments: tuple[SegmentInfo, ...]
    named_data: tuple[DataKey, ...]
    constant_buffers: tuple[str, ...]
    """SHA-256 of each constant buffer kept in the flatbuffer."""
    needs: tuple[str, ...]
    """Keys the program needs from a ``.ptd``."""
    notes: tuple[str, ...] = ()
    kind: str = "pte"

    def method(self, name: str) -> MethodInfo | None:
        return next((m for m in self.methods if m.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return _jsonable(self)


@dataclass(frozen=True)
class PtdInspection:
    path: Path
    size: int
    header: dict[str, Any]
    version: int
    segments: tuple[SegmentInfo, ...]
    keys: tuple[DataKey, ...]
    kind: str = "ptd"

    def to_json(self) -> dict[str, Any]:
        return _jsonable(self)


def _jsonable(value: Any) -> dict[str, Any]:
    def convert(item: Any) -> Any:
        if isinstance(item, Path):
            return str(item)
        if isinstance(item, dict):
            return {k: convert(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [convert(v) for v in item]
        return item

    return convert(asdict(value))


def inspect(path: str | Path) -> PteInspection | PtdInspection:
    """Describe a ``.pte`` or ``.ptd`` (told apart by the identifier at bytes 4..8).

    Raises:
        FormatError: neither, or truncated/corrupt; the message names the file and offset.
        OSError: the file cannot be opened.
    """
    from ptebuild.runtime.ptd_file import FILE_IDENTIFIER as PTD_ID
    from ptebuild.runtime.pte_file import FILE_IDENTIFIER as PTE_ID

    path = Path(path)
    with open(path, "rb") as f:
        identifier = f.read(8)[4:8]
    if identifier == PTE_ID:
        return inspect_pte(path)
    if identifier == PTD_ID:
        return inspect_ptd(path)
    raise FormatError(
        f"{path}: neither a .pte nor a .ptd: identifier {identifier!r} at offset 4 "
        f"(expected {PTE_ID!r} or {PTD_ID!r})"
    )


def inspect_pte(path: str | Path) -> PteInspection:
    """Describe a ``.pte``. Raises FormatError/OSError as :func:`inspect` does."""
    from ptebuild.runtime.pte_file import EXTENDED_HEADER_MAGIC, EXTENDED_HEADER_OFFSET, _read_layout, _segments, read_pte

    path = Path(path)
    source = str(path)
    from ptebuild.runtime.loader import with_cuda_keys

    needs = tuple(sorted(with_cuda_keys(read_pte(path)).required_keys))
    with open(path, "rb") as f:
        size = file_size(f)
        layout = _read_layout(f, source)
        f.seek(EXTENDED_HEADER_OFFSET)
        extended = f.read(len(EXTENDED_HEADER_MAGIC)) == EXTENDED_HEADER_MAGIC
        view = FlatbufferView(read_exact(f, source, 0, layout.program_size, "Program flatbuffer"), source)
        program = view.root("Program")
        segments = _segments(program, source, layout)
        inline = program.tables(3, "backend_delegate_data")
        users: dict[int, list[str]] = {}
        notes: list[str] = []
        methods = []
        for plan in program.tables(1, "execution_plan"):
            method = _method(f, plan, inline, segments, notes)
            methods.append(method)
            for d in method.delegates:
                if d.location == "segment":
                    users.setdefault(d.data_index, []).append(f"method {method.name!r} delegate {d.index} ({d.backend})")
        named = []
        for item in program.tables(7, "named_data"):
            key = item.string(0, "key") or ""
            index = item.scalar(1, "segment_index", U32)
            if index >= len(segments):
                raise FormatError(f"{source}: {item.path} ({key!r}) points at segment {index}, file has {len(segments)}")
            offset, length = segments[index]
            named.append(DataKey(key, length, index, sha256_of_range(f, source, offset, length, f"named data {key!r}")))
            users.setdefault(index, []).append(f"named data {key!r}")
        constant = program.table(5, "constant_segment")
        if constant is not None:
            users.setdefault(constant.scalar(0, "segment_index", U32), []).append("constant tensors")
        for i, mutable in enumerate(program.tables(6, "mutable_data_segments")):
            users.setdefault(mutable.scalar(0, "segment_index", U32), []).append(f"mutable data {i}")
        segment_infos = tuple(
            SegmentInfo(i, offset, length, sha256_of_range(f, source, offset, length, f"segment {i}"), tuple(users.get(i, ())))
            for i, (offset, length) in enumerate(segments)
        )
        buffers = tuple(
            hashlib.sha256(buffer.byte_vector(0, "storage") or b"").hexdigest()
            for buffer in program.tables(2, "constant_buffer")
        )
    header = {
        "identifier": "ET12",
        "extended_header": extended,
        "program_size": layout.program_size,
        "segment_base_offset": layout.segment_base,
        "segment_data_size": layout.segment_data_size,
    }
    return PteInspection(
        path=path,
        size=size,
        header=header,
        version=program.scalar(0, "version", U32),
        methods=tuple(methods),
        segments=segment_infos,
        named_data=tuple(named),
        constant_buffers=buffers,
        needs=needs,
        notes=tuple(notes),
    )


def inspect_ptd(path: str | Path) -> PtdInspection:
    """Describe a ``.ptd``. Raises FormatError/OSError as :func:`inspect` does."""
    from ptebuild.runtime.ptd_file import HEADER, HEADER_OFFSET, read_ptd

    path = Path(path)
    ptd = read_ptd(path)
    with open(path, "rb") as f:
        size = file_size(f)
        _, length, fb_offset, fb_size, base, data_size = HEADER.unpack_from(
            read_exact(f, str(path), 0, HEADER_OFFSET + HEADER.size, "FlatTensor header"), HEADER_OFFSET
        )
        digests = ptd.sha256_by_segment()
        spans = {e.segment_index: (e.offset, e.size) for e in ptd.entries.values()}
        users: dict[int, list[str]] = {}
        for entry in ptd.entries.values():
            users.setdefault(entry.segment_index, []).append(entry.key)
    header = {
        "identifier": "FT01",
        "header_length": length,
        "flatbuffer_offset": fb_offset,
        "flatbuffer_size": fb_size,
        "segment_base_offset": base,
        "segment_data_size": data_size,
    }
    segments = tuple(
        SegmentInfo(i, spans[i][0], spans[i][1], digests[i], tuple(sorted(users[i]))) for i in sorted(spans)
    )
    keys = tuple(
        DataKey(e.key, e.size, e.segment_index, digests[e.segment_index])
        for e in sorted(ptd.entries.values(), key=lambda e: e.key)
    )
    return PtdInspection(path, size, header, ptd.version, segments, keys)


def _method(f, plan: Table, inline: list[Table], segments: list[tuple[int, int]], notes: list[str]) -> MethodInfo:
    name = plan.string(0, "name") or ""
    values = [_value(v) for v in plan.tables(2, "values")]
    inputs = tuple(_spec(i, values) for i in plan.scalars(3, "inputs", I32))
    outputs = tuple(_spec(i, values) for i in plan.scalars(4, "outputs", I32))
    operators = tuple(
        (op.string(0, "name") or "") + (f".{overload}" if (overload := op.string(1, "overload")) else "")
        for op in plan.tables(6, "operators")
    )
    chains = []
    instructions = 0
    for chain in plan.tables(5, "chains"):
        steps = [_instruction(i) for i in chain.tables(2, "instructions")]
        instructions += len(steps)
        chains.append({"inputs": chain.scalars(0, "inputs", I32), "outputs": chain.scalars(1, "outputs", I32), "instructions": steps})
    delegates = []
    specs = []
    for index, delegate in enumerate(plan.tables(7, "delegates")):
        info = _delegate(f, index, name, delegate, inline, segments, notes)
        delegates.append(info)
        specs.append({"id": info.backend, "location": info.location, "compile_specs": _compile_specs(delegate)})
    parts = {
        "inputs": [asdict(s) for s in inputs],
        "outputs": [asdict(s) for s in outputs],
        "values": values,
        "operators": list(operators),
        "chains": chains,
        "delegates": specs,
        "non_const_buffer_sizes": plan.scalars(8, "non_const_buffer_sizes", I64),
    }
    digests = {part: _digest(value) for part, value in parts.items()}
    return MethodInfo(
        name=name,
        inputs=inputs,
        outputs=outputs,
        operators=operators,
        delegates=tuple(delegates),
        values=len(values),
        instructions=instructions,
        plan_sha256=_digest(parts),
        plan_parts=digests,
    )


def _digest(value: Any) -> str:
    from ptebuild.canonical import canonical_bytes

    return hashlib.sha256(canonical_bytes(value)).hexdigest()


def _value(evalue: Table) -> dict[str, Any]:
    tag = evalue.scalar(0, "val_type", U8)
    kind = VALUE_TYPES.get(tag, f"type {tag}")
    val = evalue.table(1, "val")
    out: dict[str, Any] = {"type": kind}
    if val is None:
        return out
    if kind == "Tensor":
        out.update(
            dtype=DTYPES.get(val.scalar(0, "scalar_type", I8), str(val.scalar(0, "scalar_type", I8))),
            storage_offset=val.scalar(1, "storage_offset", I32),
            sizes=val.scalars(2, "sizes", I32),
            dim_order=val.scalars(3, "dim_order", U8),
            requires_grad=val.scalar(4, "requires_grad", U8),
            data_buffer_idx=val.scalar(5, "data_buffer_idx", U32),
            layout=val.scalar(7, "layout", I8),
            dynamism=DYNAMISM.get(val.scalar(8, "shape_dynamism", I8), "?"),
        )
        allocation = val.table(6, "allocation_info")
        if allocation is not None:
            out["allocation"] = [
                allocation.scalar(0, "memory_id", U32),
                allocation.scalar(1, "memory_offset_low", U32) | allocation.scalar(2, "memory_offset_high", U32) << 32,
            ]
        extra = val.table(9, "extra_tensor_info")
        if extra is not None:
            out["extra"] = [extra.scalar(0, "mutable_data_segments_idx", U64), extra.string(1, "fully_qualified_name"), extra.scalar(2, "location", U8)]
    elif kind in ("Int", "Bool"):
        out["value"] = val.scalar(0, "value", I64 if kind == "Int" else U8)
    elif kind == "Double":
        out["value"] = repr(val.scalar(0, "value", F64))
    elif kind == "String":
        out["value"] = val.string(0, "value")
    elif kind in ("IntList", "TensorList", "OptionalTensorList", "BoolList", "DoubleList"):
        fmt = {"IntList": I64, "DoubleList": F64, "BoolList": U8}.get(kind, I32)
        out["items"] = [repr(x) if kind == "DoubleList" else x for x in val.scalars(0, "items", fmt)]
    return out


def _spec(index: int, values: list[dict[str, Any]]) -> ValueSpec:
    if not 0 <= index < len(values):
        return ValueSpec(index, "out of range")
    value = values[index]
    if value["type"] != "Tensor" or "dtype" not in value:
        return ValueSpec(index, value["type"])
    return ValueSpec(index, "Tensor", value["dtype"], tuple(value["sizes"]), value["dynamism"])


def _instruction(instruction: Table) -> list[Any]:
    tag = instruction.scalar(0, "instr_args_type", U8)
    kind = INSTRUCTIONS.get(tag, f"type {tag}")
    args = instruction.table(1, "instr_args")
    if args is None:
        return [kind]
    if kind in ("KernelCall", "DelegateCall"):
        return [kind, args.scalar(0, "index", I32), args.scalars(1, "args", I32)]
    if kind in ("MoveCall", "JumpFalseCall"):
        return [kind, args.scalar(0, "first", I32), args.scalar(1, "second", I32)]
    return [kind, args.scalar(0, "value_index", I32)]


def _compile_specs(delegate: Table) -> list[list[str]]:
    return [
        [spec.string(0, "key") or "", hashlib.sha256(spec.byte_vector(1, "value") or b"").hexdigest()]
        for spec in delegate.tables(2, "compile_specs")
    ]


def _delegate(
    f, index: int, method: str, delegate: Table, inline: list[Table], segments: list[tuple[int, int]], notes: list[str]
) -> DelegateInfo:
    from ptebuild.runtime.pte_file import DataLocation, _delegate_blob
    from ptebuild.runtime import cuda_payload
    from ptebuild.runtime.xnnpack_blob import BACKEND_ID, xnnpack_named_keys

    source = delegate.view.source
    backend = delegate.string(0, "id") or ""
    where = f"{source}: method {method!r} delegate {index} ({backend})"
    reference = delegate.table(1, "processed")
    if reference is None:
        raise FormatError(f"{where}: {delegate.path} has no processed data")
    location = reference.scalar(0, "location", U8)
    data_index = reference.scalar(1, "index", U32)
    if location == DataLocation.INLINE and data_index < len(inline):
        data = inline[data_index].byte_vector(0, "data") or b""
        offset, size, sha256 = None, len(data), hashlib.sha256(data).hexdigest()
    elif location == DataLocation.SEGMENT and data_index < len(segments):
        offset, size = segments[data_index]
        sha256 = sha256_of_range(f, source, offset, size, f"payload of {where}")
    else:
        raise FormatError(f"{where}: bad processed reference (location {location}, index {data_index})")
    keys = None
    if backend == BACKEND_ID:
        try:
            keys = tuple(sorted(xnnpack_named_keys(_delegate_blob(f, delegate, inline, segments, where), where)))
        except FormatError as exc:
            notes.append(f"cannot list the keys of method {method!r} delegate {index}: {exc}")
    elif backend == cuda_payload.BACKEND_ID:
        try:
            blob = _delegate_blob(f, delegate, inline, segments, where)
            if cuda_payload.is_cuda_payload(blob):
                keys = tuple(sorted(cuda_payload.decode(blob, where).keys))
        except FormatError as exc:
            notes.append(f"cannot list the keys of method {method!r} delegate {index}: {exc}")
    return DelegateInfo(
        index=index,
        backend=backend,
        location="inline" if location == DataLocation.INLINE else "segment",
        data_index=data_index,
        offset=offset,
        size=size,
        sha256=sha256,
        compile_specs=tuple(key for key, _ in _compile_specs(delegate)),
        keys=keys,
    )


def describe(result: PteInspection | PtdInspection) -> list[str]:
    """The inspection as lines of text, for ``ptebuild inspect``."""
    lines = []
    h = result.header
    if isinstance(result, PtdInspection):
        lines.append(f"{result.path}: ExecuTorch data file (FT01), {result.size} bytes, version {result.version}")
        lines.append(
            f"header: flatbuffer [{h['flatbuffer_offset']}, +{h['flatbuffer_size']}), "
            f"segment data at {h['segment_base_offset']} ({h['segment_data_size']} bytes)"
        )
        lines.append(f"keys: {len(result.keys)} in {len(result.segments)} segments")
        for key in result.keys:
            lines.append(f"  {key.key}  {key.size} bytes  segment {key.segment}")
        return lines
    lines.append(f"{result.path}: ExecuTorch program (ET12), {result.size} bytes, version {result.version}")
    if h["extended_header"]:
        lines.append(
            f"header: program {h['program_size']} bytes, segment data at {h['segment_base_offset']} "
            f"({h['segment_data_size']} bytes)"
        )
    else:
        lines.append("header: no extended header (no segments)")
    for method in result.methods:
        lines.append(f"method {method.name}: {method.values} values, {method.instructions} instructions")
        lines.append(f"  inputs:  {', '.join(s.describe() for s in method.inputs) or '-'}")
        lines.append(f"  outputs: {', '.join(s.describe() for s in method.outputs) or '-'}")
        lines.append(f"  operators: {', '.join(method.operators) or '-'}")
        for d in method.delegates:
            where = f"segment {d.data_index}" if d.location == "segment" else f"inline {d.data_index}"
            keys = "keys unknown" if d.keys is None else f"{len(d.keys)} keys"
            lines.append(f"  delegate {d.index}: {d.backend}, {where}, {d.size} bytes, {keys}")
    lines.append(f"segments: {len(result.segments)}")
    for s in result.segments:
        lines.append(f"  {s.index}: [{s.offset}, +{s.size}) {', '.join(s.used_by) or 'unused'}")
    if result.constant_buffers:
        lines.append(f"constant buffers: {len(result.constant_buffers)}")
    lines.append(f"named data: {len(result.named_data)}")
    for k in result.named_data:
        lines.append(f"  {k.key}  {k.size} bytes  segment {k.segment}")
    lines.append(f"needs from a .ptd: {len(result.needs)} keys")
    for key in result.needs:
        lines.append(f"  {key}")
    for note in result.notes:
        lines.append(f"note: {note}")
    return lines
