"""A ``.pte``'s figures read from the file alone: its size split, each method's planned buffers,
its delegate and operator calls, and what ``inspect`` shows of them with the build record beside
it (:class:`ptebuild.insight.file_insight.FileInsight`).

Pure Python over :func:`.pte_file.open_pte` (which documents the format); nothing is executed, and
neither torch nor executorch is imported. The values these readers return, and what each part
means, are in :mod:`ptebuild.insight` (:mod:`~ptebuild.insight.sizes`, :mod:`~ptebuild.insight.memory`,
:mod:`~ptebuild.insight.calls`). Every reader raises :class:`~ptebuild.errors.FormatError` for a
corrupt file (the message names the file and the field) and OSError for one it cannot read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ptebuild.errors import FormatError
from ptebuild.insight.calls import MethodCalls
from ptebuild.insight.delegation import counts
from ptebuild.insight.file_insight import FileInsight
from ptebuild.insight.memory import BOUND, IoPoint, MethodMemory, tensor_bytes
from ptebuild.insight.program import ProgramInsight
from ptebuild.insight.sizes import SizeSplit, WeightsFile
from ptebuild.runtime.pte_file import DataLocation, open_pte


def pte_split(path: str | Path) -> SizeSplit:
    """The parts of a ``.pte`` (no ``.ptd``: :meth:`SizeSplit.with_weights` adds them).

    Raises:
        FormatError: not a ``.pte``, or truncated/corrupt (the message names the file and field).
        OSError: it cannot be read.
    """
    with open_pte(path) as pte:
        segments = pte.segments
        claimed: dict[int, str] = {}
        inline_delegates: dict[int, str] = {}
        for plan in pte.execution_plans():
            method = plan.name()
            for delegate in plan.delegates():
                backend = delegate.backend() or "?"
                where = f"{pte.source}: method {method!r} delegate {delegate.index} ({backend})"
                reference = delegate.processed(where)
                if reference.location == DataLocation.SEGMENT:
                    claimed.setdefault(reference.index, f"delegate {backend}")
                else:
                    inline_delegates.setdefault(reference.index, backend)
        constant = pte.constant_segment_index()
        if constant is not None:
            claimed.setdefault(constant, "constants")
        for index in pte.mutable_data_segment_indexes():
            claimed.setdefault(index, "mutable data")
        code_keys = _code_keys(pte)
        for named in pte.named_data():
            claimed.setdefault(named.segment_index(), "compiled code" if named.key() in code_keys else "named data")
        inline_constants = sum(len(buffer) for buffer in pte.constant_buffers())
        by_backend: dict[str, int] = {}
        for index, backend in inline_delegates.items():
            if index < pte.inline_data_count:
                by_backend[backend] = by_backend.get(backend, 0) + len(pte.inline_data(index))
        inline = sum(by_backend.values())
        parts = {"constants": inline_constants, "named data": 0, "compiled code": 0, "mutable data": 0, "unclaimed": 0}
        for index, (_, size) in enumerate(segments):
            owner = claimed.get(index, "unclaimed")
            if owner.startswith("delegate "):
                backend = owner.removeprefix("delegate ")
                by_backend[backend] = by_backend.get(backend, 0) + size
            else:
                parts[owner] += size
        program_size = pte.header.program_size
        total = pte.file_size
    return SizeSplit(
        pte=total,
        plan=program_size - inline_constants - inline,
        constants=parts["constants"],
        named_data=parts["named data"],
        delegates=tuple(sorted(by_backend.items())),
        mutable_data=parts["mutable data"],
        unclaimed=parts["unclaimed"],
        padding=total - program_size - sum(size for _, size in segments),
        code=parts["compiled code"],
    )


def _code_keys(pte: Any) -> set[str]:
    """The named-data keys that hold compiled code, per the payload readers of the file's delegates."""
    from ptebuild.runtime.payload_lookup import reader_for

    readers = [reader for plan in pte.execution_plans() for delegate in plan.delegates()
               if (reader := reader_for(delegate.backend() or "")) is not None]
    return {key for named in pte.named_data() if (key := named.key()) and any(r.is_code(key) for r in readers)}




def planned_buffers(path: str | Path) -> dict[str, tuple[int, ...]]:
    """Each method's planned buffer sizes, read from the ``.pte`` (entry 0 left out), in file order.

    Raises FormatError (a corrupt file) or OSError.
    """
    with open_pte(path) as pte:
        return {plan.name(): tuple(plan.non_const_buffer_sizes()[1:]) for plan in pte.execution_plans()}




def program_calls(path: str | Path) -> tuple[MethodCalls, ...]:
    """Each method's calls, in file order.

    Raises FormatError (a corrupt file: the message names the field) or OSError.
    """
    found = []
    with open_pte(path) as pte:
        for plan in pte.execution_plans():
            operators = [op.name + (f".{op.overload}" if op.overload else "") for op in plan.operators()]
            backends = [d.backend() or "?" for d in plan.delegates()]
            delegated: list[str] = []
            called: list[str] = []
            for chain in plan.chains():
                for instruction in chain.instructions:
                    if not instruction.operands or not isinstance(instruction.operands[0], int):
                        continue
                    index = instruction.operands[0]
                    if instruction.kind == "DelegateCall":
                        delegated.append(backends[index] if 0 <= index < len(backends) else f"delegate {index}")
                    elif instruction.kind == "KernelCall":
                        called.append(operators[index] if 0 <= index < len(operators) else f"operator {index}")
            found.append(MethodCalls(plan.name(), counts(delegated), counts(called)))
    return tuple(found)


def read_file_insight(path: str | os.PathLike[str]) -> FileInsight:
    """The figures of the ``.pte`` at ``path`` as ``inspect`` shows them: the file's own, and what
    a build record in the same folder that names this file with these bytes recorded (the
    program's name, its ``.ptd`` files and who shares them, its delegation by operator, mutable
    buffers, inputs' and outputs' bytes at each dynamic size). A record that cannot be read is
    passed over, with a note.

    Raises FormatError (a corrupt ``.pte``) or OSError.
    """
    path = Path(path)
    calls = program_calls(path)
    split = pte_split(path)
    planned = planned_buffers(path)
    program, recorded, weights, notes = _recorded(path)
    base = recorded if recorded is not None else ProgramInsight(memory=_bound_io(path))
    return FileInsight(calls, base.with_files(split.with_weights(weights), planned), program, recorded is not None, tuple(notes))


def _recorded(path: Path) -> tuple[str | None, ProgramInsight | None, list[WeightsFile], list[str]]:
    from ptebuild.runtime.record import read_build_record

    try:
        record = read_build_record(path.parent)
    except FormatError as exc:
        return None, None, [], [f"the build record beside it is not used: {exc}"]
    if record is None:
        return None, None, [], []
    owners = record.programs_using(path)
    if len(owners) != 1:
        return None, None, [], []
    name = owners[0]
    entry = record.targets[name]
    weights = []
    for file, info in sorted(entry["outputs"].items()):
        if file.endswith(".ptd"):
            others = tuple(sorted(other for other, e in record.targets.items() if other != name and file in e.get("outputs", {})))
            weights.append(WeightsFile(file, int(info["bytes"]), others))
    try:
        figures = ProgramInsight.from_json(entry["insight"]) if isinstance(entry.get("insight"), dict) else None
    except (KeyError, TypeError, ValueError):
        return name, None, weights, [f"the figures the build record keeps for {name} cannot be read"]
    return name, figures, weights, []


def _bound_io(path: Path) -> tuple[MethodMemory, ...]:
    """Each method's inputs' and outputs' bytes at the sizes the file declares."""
    from ptebuild.runtime.pte_inspection import DTYPES

    found = []
    with open_pte(path) as pte:
        for plan in pte.execution_plans():
            values = plan.values()

            def total(indexes: list[int], values: Any = values) -> int:
                size = 0
                for i in indexes:
                    tensor = values[i].tensor if 0 <= i < len(values) else None
                    if tensor is not None:
                        size += tensor_bytes(DTYPES.get(tensor.scalar_type, "?"), tensor.sizes) or 0
                return size

            found.append(MethodMemory(plan.name(), (), (), (IoPoint(BOUND, (), total(plan.inputs()), total(plan.outputs())),)))
    return tuple(found)
