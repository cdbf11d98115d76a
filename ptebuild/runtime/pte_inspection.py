"""Reads a ``.pte`` into a :class:`~.inspection.PteInspection`, part by part.

Pure Python; imports neither torch nor executorch. The file is read through
:func:`.pte_file.open_pte` (which documents the format); a ``.pte`` is described as:

- its header: identifier, extended header (program size, segment base and data size);
- each method (``ExecutionPlan``): inputs and outputs as the flatbuffer types them (a tensor's
  dtype, sizes at the example size, shape dynamism), operators, delegates (backend, where the
  payload lives, its size and SHA-256, and what the payload reader its backend declares says of
  it: the named-data keys it needs, what it holds (:mod:`.payloads`)), how many of its calls the
  delegates take and
  how many are operator calls outside them, and a digest of the plan itself (values, chains, instructions, operators, delegate specs;
  not the payloads) so that two plans compare with one string;
- its segments (offset, size, SHA-256, what uses each), its named data (key, size), the
  constant buffers, and the keys it needs from a ``.ptd``.

Names shown for the schema's codes: :data:`DTYPES` (executorch ``ScalarType``,
``scalar_type.fbs``) and :data:`DYNAMISM` (``TensorShapeDynamism``, ``program.fbs``), both
executorch 1.5.1.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from ptebuild.canonical import canonical_bytes
from ptebuild.errors import FormatError
from ptebuild.hashing import hash_bytes
from ptebuild.runtime.inspection import BufferSpec, DataKey, DelegateInfo, MethodInfo, PteInspection, SegmentInfo, ValueSpec
from ptebuild.runtime.llm_facts import constant_value, mutable_buffers
from ptebuild.runtime.payload_lookup import reader_for
from ptebuild.runtime.pte_file import (
    DataLocation,
    Delegate,
    ExecutionPlan,
    Instruction,
    PteReader,
    Value,
    open_pte,
    read_pte,
)

#: executorch ``ScalarType`` (scalar_type.fbs) -> torch-style dtype name.
DTYPES = {
    0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
    7: "float64", 11: "bool", 12: "qint8", 13: "quint8", 14: "qint32", 15: "bfloat16",
    16: "quint4x2", 17: "quint2x4", 22: "bits16", 23: "float8_e5m2", 24: "float8_e4m3fn",
    25: "float8_e5m2fnuz", 26: "float8_e4m3fnuz", 27: "uint16", 28: "uint32", 29: "uint64",
}
#: ``TensorShapeDynamism`` -> name.
DYNAMISM = {0: "static", 1: "dynamic-bound", 2: "dynamic-unbound"}


def inspect_pte(path: str | Path) -> PteInspection:
    """Describe a ``.pte``.

    Raises:
        FormatError: not a ``.pte``, or truncated/corrupt; the message names the file and offset.
        OSError: the file cannot be opened.
    """
    path = Path(path)
    needs = tuple(sorted(read_pte(path).required_keys))
    with open_pte(path) as pte:
        source = pte.source
        segments = pte.segments
        users: dict[int, list[str]] = {}
        notes: list[str] = []
        methods = []
        for plan in pte.execution_plans():
            method = _method(pte, plan, notes)
            methods.append(method)
            for d in method.delegates:
                if d.location == "segment":
                    users.setdefault(d.data_index, []).append(f"method {method.name!r} delegate {d.index} ({d.backend})")
        named = []
        for item in pte.named_data():
            key = item.key() or ""
            index = item.segment_index()
            if index >= len(segments):
                raise FormatError(f"{source}: {item.path} ({key!r}) points at segment {index}, file has {len(segments)}")
            offset, length = segments[index]
            named.append(DataKey(key, length, index, pte.sha256_of_range(offset, length, f"named data {key!r}")))
            users.setdefault(index, []).append(f"named data {key!r}")
        constant = pte.constant_segment_index()
        if constant is not None:
            users.setdefault(constant, []).append("constant tensors")
        for i, mutable in enumerate(pte.mutable_data_segment_indexes()):
            users.setdefault(mutable, []).append(f"mutable data {i}")
        segment_infos = tuple(
            SegmentInfo(i, offset, length, pte.sha256_of_range(offset, length, f"segment {i}"), tuple(users.get(i, ())))
            for i, (offset, length) in enumerate(segments)
        )
        buffers = tuple(hash_bytes(buffer) for buffer in pte.constant_buffers())
        version = pte.version()
    layout = pte.header
    header = {
        "identifier": "ET12",
        "extended_header": layout.extended,
        "program_size": layout.program_size,
        "segment_base_offset": layout.segment_base,
        "segment_data_size": layout.segment_data_size,
    }
    return PteInspection(
        path=path,
        size=pte.file_size,
        header=header,
        version=version,
        methods=tuple(methods),
        segments=segment_infos,
        named_data=tuple(named),
        constant_buffers=buffers,
        needs=needs,
        notes=tuple(notes),
        kernels=_kernels(path),
    )


def _kernels(path: Path) -> dict[str, tuple[str, ...]]:
    """Operator -> kernel keys (``()`` for one listed but never called), as the operator list has them."""
    from ptebuild.runtime.oplist import program_operators

    found = program_operators(path)
    return {op: found.kernels.get(op, ()) for op in found.operators}


def _method(pte: PteReader, plan: ExecutionPlan, notes: list[str]) -> MethodInfo:
    name = plan.name()
    read = plan.values()
    returns_constant, constant = constant_value(plan, read)
    buffers = tuple(BufferSpec(b.value, DTYPES.get(b.scalar_type, f"type {b.scalar_type}"), b.sizes, b.name)
                    for b in mutable_buffers(plan, read))
    values = [_value(v) for v in read]
    inputs = tuple(_spec(i, values) for i in plan.inputs())
    outputs = tuple(_spec(i, values) for i in plan.outputs())
    operators = tuple(op.name + (f".{op.overload}" if op.overload else "") for op in plan.operators())
    chains = []
    instructions = 0
    calls: dict[str, int] = {}
    for chain in plan.chains():
        steps = [_instruction(i) for i in chain.instructions]
        instructions += len(steps)
        for step in steps:
            calls[step[0]] = calls.get(step[0], 0) + 1
        chains.append({"inputs": list(chain.inputs), "outputs": list(chain.outputs), "instructions": steps})
    delegates = []
    specs = []
    for delegate in plan.delegates():
        info = _delegate(pte, name, delegate, notes)
        delegates.append(info)
        specs.append({"id": info.backend, "location": info.location, "compile_specs": _compile_specs(delegate)})
    parts = {
        "inputs": [asdict(s) for s in inputs],
        "outputs": [asdict(s) for s in outputs],
        "values": values,
        "operators": list(operators),
        "chains": chains,
        "delegates": specs,
        "non_const_buffer_sizes": plan.non_const_buffer_sizes(),
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
        delegate_calls=calls.get("DelegateCall", 0),
        kernel_calls=calls.get("KernelCall", 0),
        mutable_buffers=buffers,
        returns_constant=returns_constant,
        constant=constant,
    )


def _digest(value: Any) -> str:
    return hash_bytes(canonical_bytes(value))


def _value(value: Value) -> dict[str, Any]:
    """The value as the plan digest has always hashed it (keys and their order are part of it)."""
    kind = value.kind
    out: dict[str, Any] = {"type": kind}
    if not value.present:
        return out
    tensor = value.tensor
    if tensor is not None:
        out.update(
            dtype=DTYPES.get(tensor.scalar_type, str(tensor.scalar_type)),
            storage_offset=tensor.storage_offset,
            sizes=list(tensor.sizes),
            dim_order=list(tensor.dim_order),
            requires_grad=tensor.requires_grad,
            data_buffer_idx=tensor.data_buffer_idx,
            layout=tensor.layout,
            dynamism=DYNAMISM.get(tensor.shape_dynamism, "?"),
        )
        if tensor.allocation is not None:
            out["allocation"] = [tensor.allocation.memory_id, tensor.allocation.memory_offset]
        if tensor.extra is not None:
            extra = tensor.extra
            out["extra"] = [extra.mutable_data_segments_idx, extra.fully_qualified_name, extra.location]
    elif kind == "Double":
        out["value"] = repr(value.scalar)
    elif kind in ("Int", "Bool", "String"):
        out["value"] = value.scalar
    elif value.items is not None:
        out["items"] = [repr(x) if kind == "DoubleList" else x for x in value.items]
    return out


def _spec(index: int, values: list[dict[str, Any]]) -> ValueSpec:
    if not 0 <= index < len(values):
        return ValueSpec(index, "out of range")
    value = values[index]
    if value["type"] != "Tensor" or "dtype" not in value:
        return ValueSpec(index, value["type"])
    return ValueSpec(index, "Tensor", value["dtype"], tuple(value["sizes"]), value["dynamism"])


def _instruction(instruction: Instruction) -> list[Any]:
    return [instruction.kind, *(list(o) if isinstance(o, tuple) else o for o in instruction.operands)]


def _compile_specs(delegate: Delegate) -> list[list[str]]:
    return [[spec.key, hash_bytes(spec.value)] for spec in delegate.compile_specs()]


def _delegate(pte: PteReader, method: str, delegate: Delegate, notes: list[str]) -> DelegateInfo:
    index = delegate.index
    backend = delegate.backend()
    where = f"{pte.source}: method {method!r} delegate {index} ({backend})"
    reference = delegate.processed(where)
    location, data_index = reference.location, reference.index
    if location == DataLocation.INLINE and data_index < pte.inline_data_count:
        data = pte.inline_data(data_index)
        offset, size, sha256 = None, len(data), hash_bytes(data)
    elif location == DataLocation.SEGMENT and data_index < len(pte.segments):
        offset, size = pte.segments[data_index]
        sha256 = pte.sha256_of_range(offset, size, f"payload of {where}")
    else:
        raise FormatError(f"{where}: bad processed reference (location {location}, index {data_index})")
    keys = None
    contents = summary = None
    reader = reader_for(backend)
    if reader is not None:
        try:
            info = reader.describe(pte.payload(method, delegate))
            keys, contents, summary = info.keys, info.contents, info.summary
        except FormatError as exc:
            verb = "read" if reader.describes_contents else "list the keys of"
            notes.append(f"cannot {verb} method {method!r} delegate {index}: {exc}")
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
        contents=contents,
        summary=summary,
    )

