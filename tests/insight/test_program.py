"""A program's figures as one value: the worker's half joined with the files', JSON, text."""

from __future__ import annotations

from insight_data import figures

from ptebuild.insight.memory import MethodMemory
from ptebuild.insight.program import ProgramInsight
from ptebuild.runtime.pte_insight import pte_split


def test_the_workers_half_and_the_files_half(programs):
    whole = figures()
    worker = whole.worker_part()
    assert worker.size is None and worker.planned_bytes is None and worker.memory[0].planned == ()
    assert worker.memory[0].mutable == whole.memory[0].mutable and worker.delegation == whole.delegation
    joined = worker.with_files(whole.size, {"forward": (37_184,), "other": (10,)})
    assert joined.planned_bytes == 37_194
    assert joined.method_memory("forward").io == whole.memory[0].io
    assert joined.method_memory("other") == MethodMemory("other", (10,))
    from_file = ProgramInsight().with_files(pte_split(programs.a.pte), {"forward": (64,)})
    assert from_file.delegation is None and from_file.planned_bytes == 64


def test_json_round_trip():
    whole = figures(shared_with=("policy_portable",))
    assert ProgramInsight.from_json(whole.to_json()) == whole
    assert ProgramInsight.from_json(None) == ProgramInsight() == ProgramInsight.from_json({})
    assert ProgramInsight.from_json(ProgramInsight().to_json()) == ProgramInsight()


def test_cells_and_lines():
    whole = figures(shared_with=("policy_portable",))
    assert whole.cells() == ("90.0%", "5.9 KiB + 39.1 KiB", "36.3 KiB")
    assert ProgramInsight().cells() == ("-", "-", "-")
    text = "\n".join(whole.describe())
    assert "delegation: 90.0% of 10 operator nodes delegated (XnnpackBackend); left to kernels: aten_mean_dim ×1" in text
    assert "size: .pte 5.9 KiB: plan 2.0 KiB, constants 8 B, named data 1000 B, delegate XnnpackBackend 2.9 KiB" in text
    assert "  weights.ptd 39.1 KiB, shared with policy_portable" in text
    assert "  forward: 90.0%: XnnpackBackend 10 nodes in 1 subgraph; left to kernels: aten_mean_dim ×1, getitem ×1" in text
    assert ("memory forward: planned 36.3 KiB; mutable buffers 256 B (cache float32[4, 16]); at example (batch=2): inputs 6.0 KiB, "
            "outputs 32 B; at batch max (batch=8): inputs 24.0 KiB, outputs 128 B") in text
