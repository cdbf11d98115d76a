"""``ptebuild inspect``'s text: an inspection (:mod:`.inspection`) as lines, one part per line."""

from __future__ import annotations

from ptebuild.runtime.inspection import PtdInspection, PteInspection


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
