"""A build's timeline as one self-contained HTML page, as ``cargo build --timings`` writes one.

Everything is inline (CSS and SVG; no script, no font, no image, no link out), so the file opens
anywhere, offline, and can be attached to a CI run. The page:

1. a summary: the manifest, when, how long, the executor and its jobs, targets built, restored
   (cache hits) and failed, cache misses;
2. the timeline: one row per lane (the builder, then each worker slot), each target a box from
   its start to its end holding its stages in their colours, a tooltip (SVG ``<title>``) per box;
3. a table, one row per target: status, cache hit or miss, seconds, its stages as one bar, the
   delegated fraction, the size split and the planned memory as bars (scaled to the largest
   program), and the check's figures.

Every name from the build is escaped (:func:`html.escape`).
"""

from __future__ import annotations

from html import escape

from ptebuild.insight.delegation import percent
from ptebuild.insight.program import format_bytes
from ptebuild.insight.stages import Stage, seconds_by_stage
from ptebuild.insight.timeline import TargetTimeline, Timeline

STAGE_COLOURS = {
    Stage.WAITING: "#d0d4da",
    Stage.IMPORT: "#8fb8de",
    Stage.EXPORT: "#4f8fd1",
    Stage.LOWER: "#e07b39",
    Stage.EMIT: "#e6b422",
    Stage.CHECK: "#4caf6a",
    Stage.BUNDLE: "#9b6fd0",
    Stage.STORE: "#7a8a99",
    Stage.RESTORE: "#2bb0a6",
}
PART_COLOURS = {"plan": "#4f8fd1", "constants": "#e6b422", "named data": "#d99a2b", "compiled code": "#5b6f8a", "delegate": "#e07b39",
                "mutable data": "#9b6fd0", "unclaimed": "#c94c4c", "padding": "#d0d4da", "ptd": "#4caf6a"}
STATUS_COLOURS = {"built": "#2e7d32", "cached": "#2bb0a6", "failed": "#c62828", "over-budget": "#c62828"}

_WIDTH = 1100
_GUTTER = 120
_ROW = 34
_AXIS = 28

_CSS = """
body { font: 13px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px; color: #1d232a; background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 28px 0 8px; }
.summary { color: #3c4650; margin-bottom: 8px; }
.summary b { color: #1d232a; }
.legend span { display: inline-block; margin-right: 14px; }
.legend i { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 4px; vertical-align: -1px; }
table { border-collapse: collapse; margin-top: 8px; }
th, td { border-bottom: 1px solid #e3e6ea; padding: 5px 10px; text-align: left; vertical-align: middle; white-space: nowrap; }
th { background: #f3f5f7; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.fig { display: flex; align-items: center; gap: 6px; }
.bar { display: flex; flex: none; height: 12px; width: 72px; background: #f0f2f4; border-radius: 2px; overflow: hidden; }
.bar i { display: block; height: 100%; }
.status { font-weight: 600; }
.hit { color: #2bb0a6; } .miss { color: #e07b39; }
.check { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; white-space: normal; min-width: 220px; max-width: 300px; }
.check small { display: block; color: #5c6670; font-size: 11px; }
.wide { overflow-x: auto; }
.msg { color: #c62828; white-space: normal; max-width: 520px; }
svg text { font: 11px system-ui, sans-serif; fill: #1d232a; }
"""


def render(timeline: Timeline) -> str:
    """The page, as text (UTF-8 when written)."""
    title = f"ptebuild timings: {timeline.manifest}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        _summary(timeline),
        "<h2>Timeline</h2>",
        _legend(),
        _chart(timeline),
        "<h2>Programs</h2>",
        _table_legend(),
        f'<div class="wide">{_table(timeline)}</div>',
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _summary(timeline: Timeline) -> str:
    counts: dict[str, int] = {}
    for t in timeline.targets:
        counts[t.status] = counts.get(t.status, 0) + 1
    tally = ", ".join(f"<b>{n}</b> {escape(status)}" for status, n in counts.items()) or "nothing"
    when = f" at {escape(timeline.started_at)}" if timeline.started_at else ""
    executor = f"; executor <b>{escape(timeline.executor)}</b>, {timeline.jobs} jobs" if timeline.executor else ""
    return (f'<div class="summary">{len(timeline.targets)} targets in <b>{timeline.seconds:.1f}s</b>{when}{executor}: {tally}; '
            f'cache: <b class="hit">{timeline.hits} hits</b>, <b class="miss">{timeline.misses} misses</b></div>')


def _legend() -> str:
    items = "".join(f'<span><i style="background:{colour}"></i>{escape(stage.value)}</span>' for stage, colour in STAGE_COLOURS.items())
    return f'<div class="legend">{items}</div>'


_DELEGATED, _KERNELS, _PLANNED = "#e07b39", "#7a8a99", "#9b6fd0"


def _table_legend() -> str:
    """What the table's bars are made of: the stages (as above), the delegated share, the size's parts."""
    def item(colour: str, words: str) -> str:
        return f'<span><i style="background:{colour}"></i>{escape(words)}</span>'

    delegated = item(_DELEGATED, "delegated") + item(_KERNELS, "left to kernels")
    size = "".join(item(colour, ".ptd files" if part == "ptd" else f"{part} payloads" if part == "delegate" else part)
                   for part, colour in PART_COLOURS.items())
    return (f'<div class="legend"><b>delegated:</b> {delegated} <b>size</b> (bars to the largest program\'s): {size} '
            f'<b>planned memory:</b> {item(_PLANNED, "planned buffers")}</div>')


def _chart(timeline: Timeline) -> str:
    total = max([timeline.seconds, *(t.end for t in timeline.targets)], default=0.0) or 1.0
    lanes = max(len(timeline.lanes), 1 + max((t.lane for t in timeline.targets), default=0))
    height = _AXIS + lanes * _ROW + 8
    scale = (_WIDTH - _GUTTER - 10) / total

    def x(seconds: float) -> float:
        return _GUTTER + seconds * scale

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" viewBox="0 0 {_WIDTH} {height}" role="img">',
           f"<title>{escape(timeline.manifest)}: {timeline.seconds:.1f}s</title>"]
    for tick in _ticks(total):
        out.append(f'<line x1="{x(tick):.1f}" y1="{_AXIS - 6}" x2="{x(tick):.1f}" y2="{height - 4}" stroke="#e3e6ea"/>')
        out.append(f'<text x="{x(tick):.1f}" y="{_AXIS - 10}" text-anchor="middle">{tick:g}s</text>')
    for lane in range(lanes):
        name = timeline.lanes[lane] if lane < len(timeline.lanes) else f"worker {lane}"
        y = _AXIS + lane * _ROW
        fill = "#f7f8fa" if lane % 2 == 0 else "#ffffff"
        out.append(f'<rect x="0" y="{y}" width="{_WIDTH}" height="{_ROW}" fill="{fill}"/>')
        out.append(f'<text x="6" y="{y + _ROW / 2 + 4:.1f}">{escape(name)}</text>')
    for target in timeline.targets:
        y = _AXIS + target.lane * _ROW + 5
        left, width = x(target.start), max(2.0, target.seconds * scale)
        border = STATUS_COLOURS.get(target.status, "#1d232a")
        out.append(f'<g><title>{escape(_tooltip(target))}</title>')
        out.append(f'<rect x="{left:.1f}" y="{y}" width="{width:.1f}" height="{_ROW - 10}" fill="#ffffff" stroke="{border}" rx="2"/>')
        for span in target.spans:
            start = max(span.start, target.start)
            w = max(1.0, (min(span.end, target.end) - start) * scale)
            colour = STAGE_COLOURS.get(span.stage, "#999999")
            out.append(f'<rect x="{x(start):.1f}" y="{y + 2}" width="{w:.1f}" height="{_ROW - 14}" fill="{colour}">'
                       f"<title>{escape(target.name)}: {escape(span.stage.value)} {span.seconds:.2f}s</title></rect>")
        if width > 40:
            label = target.name if len(target.name) * 6.5 < width - 6 else target.name[: max(1, int((width - 12) / 6.5))] + "…"
            out.append(f'<text x="{left + 4:.1f}" y="{y + _ROW / 2 - 1:.1f}">{escape(label)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def _ticks(total: float) -> list[float]:
    steps = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600)
    step = next((s for s in steps if total / s <= 12), total / 10)
    count = int(total / step) + 1
    return [round(i * step, 3) for i in range(count)]


def _tooltip(target: TargetTimeline) -> str:
    lines = [f"{target.name} ({target.backend or 'shims'}): {target.status}, {target.seconds:.2f}s",
             "cache hit" + (f" ({target.source})" if target.source else "") if target.cache_hit else "cache miss"]
    if target.node:
        lines.append(f"built on {target.node}")
    for stage, seconds in seconds_by_stage(target.spans).items():
        lines.append(f"{stage.value}: {seconds:.2f}s")
    if target.message:
        lines.append(target.message)
    return "\n".join(lines)


def _table(timeline: Timeline) -> str:
    largest = max((t.insight.size.pte + t.insight.size.ptd_bytes for t in timeline.targets
                   if t.insight is not None and t.insight.size is not None), default=0) or 1
    planned_max = max((t.insight.planned_bytes or 0 for t in timeline.targets if t.insight is not None), default=0) or 1
    rows = ["<table><thead><tr><th>program</th><th>backend</th><th>status</th><th>cache</th><th>seconds</th><th>stages</th>"
            "<th>delegated</th><th>size</th><th>planned memory</th><th>check</th></tr></thead><tbody>"]
    for t in timeline.targets:
        colour = STATUS_COLOURS.get(t.status, "#1d232a")
        source = f" ({escape(t.source)})" if t.source else ""
        cache = f'<span class="hit">hit{source}</span>' if t.cache_hit else '<span class="miss">miss</span>'
        cells = [
            f"<td><b>{escape(t.name)}</b></td>",
            f"<td>{escape(t.backend or 'shims')}</td>",
            f'<td class="status" style="color:{colour}">{escape(t.status)}</td>',
            f"<td>{cache}</td>",
            f'<td class="num">{t.seconds:.2f}</td>',
            f"<td>{_stage_bar(t)}</td>",
            f"<td>{_delegated(t)}</td>",
            f"<td>{_size(t, largest)}</td>",
            f"<td>{_planned(t, planned_max)}</td>",
            f'<td class="check">{_check(t)}</td>',
        ]
        rows.append("<tr>" + "".join(cells) + "</tr>")
        if t.message:
            rows.append(f'<tr><td></td><td colspan="9" class="msg">{escape(t.message)}</td></tr>')
    rows.append("</tbody></table>")
    return "\n".join(rows)


def _bar(parts: list[tuple[str, float, str]], total: float, title: str) -> str:
    inner = "".join(f'<i style="width:{100 * value / total:.2f}%;background:{colour}" title="{escape(label)}"></i>'
                    for label, value, colour in parts if value > 0)
    return f'<div class="bar" title="{escape(title)}">{inner}</div>'


def _stage_bar(t: TargetTimeline) -> str:
    by_stage = seconds_by_stage(t.spans)
    total = sum(by_stage.values()) or 1.0
    parts = [(f"{stage.value} {seconds:.2f}s", seconds, STAGE_COLOURS.get(stage, "#999")) for stage, seconds in by_stage.items()]
    return _bar(parts, total, ", ".join(label for label, _, _ in parts) or "-")


def _delegated(t: TargetTimeline) -> str:
    delegation = t.insight.delegation if t.insight is not None else None
    if delegation is None:
        return "-"
    fraction = delegation.fraction or 0.0
    text = percent(delegation.fraction)
    bar = _bar([(f"delegated {text}", fraction, _DELEGATED), ("left to kernels", 1 - fraction, _KERNELS)], 1.0, delegation.describe())
    return f'<div class="fig">{bar}{escape(text)}</div>'


def _size(t: TargetTimeline, largest: int) -> str:
    size = t.insight.size if t.insight is not None else None
    if size is None:
        return "-"
    parts = []
    for label, n in size.parts():
        key = "delegate" if label.startswith("delegate ") else "ptd" if label.endswith(".ptd") else label
        parts.append((f"{label} {format_bytes(n)}", float(n), PART_COLOURS.get(key, "#999")))
    text = format_bytes(size.pte) + (f" + {format_bytes(size.ptd_bytes)} .ptd" if size.ptd else "")
    return f'<div class="fig">{_bar(parts, float(largest), ", ".join(label for label, _, _ in parts))}{escape(text)}</div>'


def _planned(t: TargetTimeline, largest: int) -> str:
    if t.insight is None or t.insight.planned_bytes is None:
        return "-"
    planned = t.insight.planned_bytes
    methods = ", ".join(f"{m.method} {format_bytes(m.planned_bytes)}" for m in t.insight.memory)
    return f'<div class="fig">{_bar([(methods, float(planned), _PLANNED)], float(largest), methods)}{escape(format_bytes(planned))}</div>'


def _check(t: TargetTimeline) -> str:
    """The check's worst error and lowest cosine (:class:`ptebuild.figures.CheckSummary`), led by
    ``PROVES NOTHING:`` for a check that cannot fail; its tolerances and data in the title."""
    from ptebuild.figures import CheckSummary, Verdict

    summary = CheckSummary.of(t.check)
    if summary is None:
        return "-"
    words = f"err {summary.max_abs_error:.1e} cos {summary.cosine:.6f}"
    if summary.verdict is Verdict.PROVES_NOTHING:
        words = f"PROVES NOTHING: {words}"
    title = f"{summary.tolerance_words()}; {summary.data_words()}"
    return f'<span title="{escape(title)}">{escape(words)}<small>{escape(title)}</small></span>'
