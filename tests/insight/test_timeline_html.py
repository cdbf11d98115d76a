"""The timings page opened in a real browser (headless Chromium): it renders, shows every
program, and its screenshot is not blank; and it names nothing outside itself."""

from __future__ import annotations

import re

import pytest
from browser import colours, dump_dom, screenshot
from insight_data import figures

from ptebuild.figures import read_figures
from ptebuild.insight.stages import Stage, StageSpan
from ptebuild.insight.timeline import TargetTimeline, Timeline, place_worker_spans
from ptebuild.insight.timeline_html import STAGE_COLOURS, render

NAMES = ("policy_xnnpack", "policy_portable", "policy_int8<&>", "encoder_vulkan")


def _timeline() -> Timeline:
    worker = (StageSpan(Stage.IMPORT, 0, 0.4), StageSpan(Stage.EXPORT, 0.4, 2), StageSpan(Stage.LOWER, 2, 6),
              StageSpan(Stage.EMIT, 6, 6.5), StageSpan(Stage.CHECK, 6.5, 8))
    targets = (
        TargetTimeline(NAMES[0], "xnnpack", "built", 0.2, 10.0, (*place_worker_spans(worker, 0.2, 9.8), StageSpan(Stage.STORE, 9.8, 10.0)),
                       lane=1, insight=figures(), check=(read_figures({"method": "forward", "sizes": {}, "output": 0, "max_abs_error": 2e-6, "cosine": 0.999999}),)),
        TargetTimeline(NAMES[1], "portable", "cached", 0.05, 0.15, (StageSpan(Stage.RESTORE, 0.05, 0.15),), cache_hit=True,
                       source="local", insight=figures(delegated=0, left=12)),
        TargetTimeline(NAMES[2], "xnnpack", "failed", 0.3, 7.0, place_worker_spans(worker[:3], 0.3, 7.0), lane=2,
                       message="manifest.toml: programs.policy_int8: lowering for xnnpack failed: <boom>"),
        TargetTimeline(NAMES[3], "vulkan", "over-budget", 7.2, 12.0, place_worker_spans(worker, 7.2, 12.0), lane=2,
                       insight=figures(pte=90_000, ptd=0)),
    )
    return Timeline("manifests/robot.toml", 12.1, targets, "2026-12-03T09:00:00+00:00", "daemon", 2, ("builder", "worker 1", "worker 2"))


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    path = tmp_path_factory.mktemp("timings") / "timings.html"
    path.write_text(render(_timeline()), encoding="utf-8")
    return path


def test_the_page_needs_nothing_from_outside(page):
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=|@import|url\(|<script|<link""", text, re.IGNORECASE)
    assert re.findall(r"https?://[^\s\"'<]+", text) == ["http://www.w3.org/2000/svg"]  # the SVG namespace, never fetched
    assert "policy_int8&lt;&amp;&gt;" in text and "<boom>" not in text


def test_the_browser_renders_every_program(page):
    dom = dump_dom(page)
    assert "<svg" in dom and "<table" in dom
    for name in NAMES:
        escaped = name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        assert dom.count(escaped) >= 2, name  # in the timeline and in the table
    assert dom.count("<tr>") >= len(NAMES)
    assert "1 hits" in dom and "3 misses" in dom


def test_its_screenshot_is_not_blank(page, tmp_path):
    found = colours(screenshot(page, tmp_path / "timings.png", 1200, 700))
    assert len(found) >= 20, f"{len(found)} colours"
    background = max(found.values())
    assert background < 0.95 * sum(found.values())  # more than a white page with a few words
    for stage in (Stage.LOWER, Stage.CHECK, Stage.RESTORE):
        colour = STAGE_COLOURS[stage]
        rgb = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
        assert found.get(rgb, 0) > 100, f"no {stage.value} bar drawn ({colour})"


def test_the_check_cell_says_what_the_check_proves():
    from dataclasses import replace

    timeline = _timeline()
    nothing = read_figures({"method": "forward", "sizes": {}, "output": 0, "max_abs_error": 0.0, "cosine": 1.0, "dtype": "float32", "atol": 1e-3,
               "rtol": 1e-4, "min_cosine": 0.9999, "verdict": "proves-nothing", "reason": "eager PyTorch's output is all zeros"})
    text = render(replace(timeline, targets=(replace(timeline.targets[0], check=(nothing,)), *timeline.targets[1:])))
    assert "PROVES NOTHING: err 0.0e+00 cos 1.000000" in text
    assert 'title="float32: atol 0.001' in text
    assert "err 2.0e-06 cos 0.999999<small>" in render(timeline)


def test_the_table_says_what_its_bars_and_check_mean():
    """A cached build's page is read without a tooltip: the bars' parts have a legend and the check
    cell shows its tolerance and data, not only in its title."""
    text = render(_timeline())
    assert "<b>delegated:</b>" in text and "left to kernels" in text and "delegate payloads" in text and ".ptd files" in text
    assert "err 2.0e-06 cos 0.999999<small>unknown: " in text and "; random inputs</small>" in text
    assert '<div class="wide">' in text  # a narrow window scrolls the table rather than cutting the check off
