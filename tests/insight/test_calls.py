"""A method's calls as a value: counts, JSON, its line."""

from __future__ import annotations

from ptebuild.insight.calls import MethodCalls


def test_counts_json_and_line():
    calls = MethodCalls("score", (("XnnpackBackend", 2),), (("aten::mean.out", 1), ("aten::where.self_out", 3)))
    assert (calls.delegated, calls.operators) == (2, 4)
    assert MethodCalls.from_json("score", calls.to_json()) == calls
    assert calls.describe() == "2 delegate calls (XnnpackBackend ×2), 4 operator calls (aten::where.self_out ×3, aten::mean.out ×1)"
    assert MethodCalls("f", (), ()).describe() == "0 delegate calls, 0 operator calls"
