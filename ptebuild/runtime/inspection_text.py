"""``ptebuild inspect``'s text: an inspection (:mod:`.inspection`) as lines.

:func:`summary` is what ``ptebuild inspect FILE`` prints: a few lines a person reads (each
method's signature with its dynamic dims as ranges, where delegates took it, its mutable buffers
(a KV cache) or the constant it returns (a language model's metadata), sizes, weights);
:func:`describe` is ``--full``: one line per part (every segment, key and operator). The summary
is built of sections (:data:`PTE_SECTIONS`), each a function of the inspection and what the build
record declared: a new figure is one more section.
"""

from __future__ import annotations

from collections.abc import Callable

from ptebuild.insight.delegation import percent
from ptebuild.runtime.declared import DeclaredInput, DeclaredProgram
from ptebuild.runtime.inspection import MethodInfo, PtdInspection, PteInspection, ValueSpec
from ptebuild.sizes import format_size

Section = Callable[[PteInspection, DeclaredProgram | None], list[str]]
"""One part of a ``.pte``'s summary: its lines (none to leave it out)."""


def summary(result: PteInspection | PtdInspection, declared: DeclaredProgram | None = None) -> list[str]:
    """The short description ``ptebuild inspect`` prints by default. ``declared``: what the build
    record beside the file says about it (:func:`ptebuild.runtime.declared.declared_program`);
    with it, inputs are named and dynamic dims shown as ranges (``batch 1..8``)."""
    if isinstance(result, PtdInspection):
        return _ptd_summary(result, declared)
    lines = []
    for section in PTE_SECTIONS:
        lines += section(result, declared)
    lines.append(f"(every segment, key and operator: ptebuild inspect --full {result.path})")
    return lines


def _headline(result: PteInspection, declared: DeclaredProgram | None) -> list[str]:
    built = f", program {declared.programs[0]} (per ptebuild.json)" if declared else ""
    count = len(result.methods)
    return [f"{result.path}: ExecuTorch program, {format_size(result.size)}, {count} method{'s' if count != 1 else ''}{built}"]


def _methods(result: PteInspection, declared: DeclaredProgram | None) -> list[str]:
    lines = []
    for method in result.methods:
        names = declared.inputs.get(method.name) if declared else None
        if method.returns_constant:  # a language model's metadata method (get_max_seq_len...): its value
            lines.append(f"  {method.name}({_signature(method, names)}) returns: {method.constant!r} (a constant: metadata)")
            continue
        outputs = ", ".join(_bounded(s) for s in method.outputs) or "nothing"
        lines.append(f"  {method.name}({_signature(method, names)}) -> {outputs}")
        notes = [f"{dim} {low}..{high}" for dim, (low, high) in (declared.dims.get(method.name, {}) if declared else {}).items()]
        notes.append(_delegation(method, _fraction(result, method.name)))
        lines.append(f"    {'; '.join(notes)}")
        if method.mutable_buffers:  # a KV cache
            lines.append(f"    mutable buffers: {len(method.mutable_buffers)} (kept between calls)")
            lines.extend(f"      {buffer.describe()}" for buffer in method.mutable_buffers)
    return lines


def _signature(method: MethodInfo, names: tuple[DeclaredInput, ...] | None) -> str:
    """The inputs by the manifest's names and dims where the record gave one per tensor, else as bounds."""
    tensors = [s for s in method.inputs if s.type == "Tensor"]
    if names is not None and len(names) == len(tensors):
        named = iter(names)
        return ", ".join(next(named).describe() if s.type == "Tensor" else s.type for s in method.inputs)
    return ", ".join(_bounded(s) for s in method.inputs)


def _bounded(spec: ValueSpec) -> str:
    """A tensor as the ``.pte`` knows it: a dynamic one by its upper bounds."""
    if spec.type != "Tensor":
        return spec.type
    sizes = ", ".join(map(str, spec.sizes or ()))
    if spec.dynamism and spec.dynamism != "static":
        return f"{spec.dtype} up to [{sizes}]"
    return f"{spec.dtype}[{sizes}]"


def _fraction(result: PteInspection, method: str) -> float | None:
    """The method's delegated fraction of its operators as its build counted it (the build
    table's ``delegated``: :mod:`ptebuild.insight.delegation`), None where no record says."""
    insight = result.insight
    if insight is None or not insight.recorded or insight.insight.delegation is None:
        return None
    return next((d.fraction for d in insight.insight.delegation.methods if d.method == method), None)


def _delegation(method: MethodInfo, fraction: float | None = None) -> str:
    """Delegation said as the build's table says it (the fraction of the method's operators its
    delegates took, where a build record counted them), then the calls the file holds."""
    calls = method.delegate_calls + method.kernel_calls
    if not method.delegates:
        return f"no delegate: {calls} operator calls on the runtime's kernels"
    backends = ", ".join(sorted({d.backend for d in method.delegates}))
    share = f"{percent(fraction)} of its operators, in " if fraction is not None else ""
    return f"delegated: {share}{method.delegate_calls} of {calls} calls ({backends})"


def _sizes(result: PteInspection, declared: DeclaredProgram | None) -> list[str]:
    """The file's bytes by part: the size split the build record, ``--timings`` and ``diff`` give
    (:func:`ptebuild.runtime.pte_insight.pte_split`: each segment counted once, however many
    delegate calls share it; the parts add up to the file)."""
    split = result.insight.insight.size if result.insight is not None else None
    if split is None:
        return []
    parts = ", ".join(f"{label} {format_size(n)}" for label, n in split.pte_parts())
    return [f"size: {format_size(split.pte)}: {parts}"]


def _weights(result: PteInspection, declared: DeclaredProgram | None) -> list[str]:
    """Where the weights are: the keys it needs from a ``.pte``'s ``.ptd``, and what it holds
    itself; compiled code kept as named data (a CUDA program's library) is said as code, not weights."""
    from ptebuild.runtime.payload_lookup import reader_for

    readers = [r for m in result.methods for d in m.delegates if (r := reader_for(d.backend)) is not None]
    code = [k for k in result.named_data if any(r.is_code(k.key) for r in readers)]
    inside = len(result.named_data) - len(code) + len(result.constant_buffers)
    code_words = f"; its compiled code ({format_size(sum(k.size for k in code))}) inside the .pte" if code else ""
    if not result.needs:
        return [f"weights: all inside the .pte ({inside} tensors or blobs); it needs no .ptd{code_words}"]
    ptds = sorted(name for name in (declared.files if declared else {}) if name.endswith(".ptd"))
    where = ", ".join(f"{name} ({format_size(declared.files[name])})" for name in ptds) if declared and ptds else "a .ptd"
    return [f"weights: {len(result.needs)} keys needed from {where}; {inside} tensors or blobs inside the .pte{code_words}"]


def _memory(result: PteInspection, declared: DeclaredProgram | None) -> list[str]:
    """Each method's planned memory (its memory-planned buffers; a delegate's own workspace is not
    in it), from the figures :mod:`.pte_insight` read."""
    if result.insight is None or not result.insight.insight.memory:
        return []
    planned = ", ".join(f"{m.method} {format_size(m.planned_bytes)}" for m in result.insight.insight.memory)
    return [f"planned memory: {planned}"]


def _left_to_kernels(result: PteInspection, declared: DeclaredProgram | None) -> list[str]:
    """The operators its delegates did not take, by method, as its build counted them (a build
    record beside the file that names it); nothing when every node was delegated or none is known."""
    delegation = result.insight.insight.delegation if result.insight is not None else None
    if delegation is None:
        return []
    lines = []
    for d in delegation.methods:
        left = [f"{op} ×{n}" for op, n in d.non_delegated if "getitem" not in op]  # a tuple access runs no kernel
        if left:
            lines.append(f"left to kernels in {d.method}: {', '.join(left)}")
    return lines


def _quantization(result: PteInspection, declared: DeclaredProgram | None) -> list[str]:
    """Which weights its build quantized and which stayed float, and why (a build record that
    counted them: :mod:`ptebuild.insight.weights`); nothing for a float program."""
    weights = result.insight.insight.weights if result.insight is not None and result.insight.recorded else None
    return weights.describe() if weights is not None else []


PTE_SECTIONS: list[Section] = [_headline, _methods, _left_to_kernels, _sizes, _memory, _weights, _quantization]
"""The summary of a ``.pte``, section by section, in order."""


def _ptd_summary(result: PtdInspection, declared: DeclaredProgram | None) -> list[str]:
    total = sum(k.size for k in result.keys)
    users = f", weights of {', '.join(declared.programs)} (per ptebuild.json)" if declared else ""
    return [
        f"{result.path}: ExecuTorch data file, {format_size(result.size)}{users}",
        f"weights: {len(result.keys)} keys, {format_size(total)}",
        f"(every key: ptebuild inspect --full {result.path})",
    ]


def describe(result: PteInspection | PtdInspection) -> list[str]:
    """The inspection as lines of text, one part per line, for ``ptebuild inspect --full``."""
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
        if method.returns_constant:
            lines.append(f"  returns: {method.constant!r} (a constant: metadata)")
        if method.mutable_buffers:
            lines.append(f"  mutable buffers: {len(method.mutable_buffers)} (kept between calls)")
            lines.extend(f"    {buffer.describe()}" for buffer in method.mutable_buffers)
        if method.delegates:
            backends = ", ".join(sorted({d.backend for d in method.delegates}))
            lines.append(
                f"  delegated: {method.delegate_calls} of {method.delegate_calls + method.kernel_calls} calls "
                f"({backends}); {method.kernel_calls} operator calls outside"
            )
        for d in method.delegates:
            where = f"segment {d.data_index}" if d.location == "segment" else f"inline {d.data_index}"
            keys = "keys unknown" if d.keys is None else f"{len(d.keys)} keys"
            lines.append(f"  delegate {d.index}: {d.backend}, {where}, {d.size} bytes, {keys}")
            if d.summary:
                lines.append(f"    {d.summary}")
    lines.append(f"segments: {len(result.segments)}")
    for s in result.segments:
        lines.append(f"  {s.index}: [{s.offset}, +{s.size}) {', '.join(s.used_by) or 'unused'}")
    if result.constant_buffers:
        lines.append(f"constant buffers: {len(result.constant_buffers)}")
    lines.append(f"named data: {len(result.named_data)}")
    for k in result.named_data:
        lines.append(f"  {k.key}  {k.size} bytes  segment {k.segment}")
    lines.append(f"needs from a .ptd: {len(result.needs)} keys")
    for needed in result.needs:
        lines.append(f"  {needed}")
    lines.append(f"operators for a selective runtime build: {len(result.kernels)} (delegated calls not listed)")
    for op, kernels in result.kernels.items():
        lines.append(f"  {op}  {' '.join(kernels) or '(not called)'}")
    if result.insight is not None:
        lines += result.insight.describe()
    for note in result.notes:
        lines.append(f"note: {note}")
    return lines
