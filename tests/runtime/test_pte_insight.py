"""A ``.pte``'s figures read from real files (tests/runtime_programs.py): the size split adds up to
the file, the weights are where the program keeps them, the planned buffers per method, each
method's calls, and what ``inspect`` shows with and without the build record beside the file."""

from __future__ import annotations

import json
import shutil

import pytest
from insight_data import figures

from ptebuild.errors import FormatError
from ptebuild.insight.memory import BOUND
from ptebuild.insight.sizes import WeightsFile
from ptebuild.runtime.pte_insight import planned_buffers, program_calls, pte_split, read_file_insight

NAMES = ("a", "xa", "xinline", "multi")


@pytest.mark.parametrize("name", NAMES)
def test_the_parts_add_up_to_the_file(programs, name):
    pte = getattr(programs, name).pte
    split = pte_split(pte)
    assert split.pte == pte.stat().st_size
    assert sum(n for _, n in split.pte_parts()) == split.pte
    assert split.plan > 0 and split.unclaimed == 0 and split.padding >= 0


def test_where_the_weights_are(programs):
    portable = pte_split(programs.a.pte)  # weights in a_weights.ptd
    assert portable.delegates == () and portable.named_data == 0 and portable.constants < 64
    external = pte_split(programs.xa.pte)  # XNNPACK, weights in xa_weights.ptd
    inside = pte_split(programs.xinline.pte)  # XNNPACK, weights in the .pte
    assert [b for b, _ in external.delegates] == ["XnnpackBackend"] == [b for b, _ in inside.delegates]
    assert external.named_data == 0
    weights = sum(p.numel() * 4 for p in programs.xinline.model.parameters())
    assert weights <= inside.named_data < weights + 1024


def test_a_cut_file_is_a_format_error(programs, tmp_path):
    data = programs.xinline.pte.read_bytes()
    cut = tmp_path / "cut.pte"
    cut.write_bytes(data[: len(data) // 2])
    for reader in (pte_split, planned_buffers, program_calls, read_file_insight):
        with pytest.raises(FormatError, match="cut.pte"):
            reader(cut)


def test_planned_buffers_per_method(programs):
    from ptebuild.runtime.pte_file import open_pte

    planned = planned_buffers(programs.multi.pte)
    with open_pte(programs.multi.pte) as pte:
        names = [plan.name() for plan in pte.execution_plans()]
        assert [plan.non_const_buffer_sizes()[0] for plan in pte.execution_plans()] == [0, 0]  # reserved, left out
    assert list(planned) == names
    assert all(len(sizes) == 1 and sizes[0] > 0 for sizes in planned.values())


def test_calls_of_an_xnnpack_and_a_portable_program(programs):
    (xa,) = program_calls(programs.xa.pte)
    assert xa.delegate_calls == (("XnnpackBackend", 1),) and xa.operators == 0
    (a,) = program_calls(programs.a.pte)
    assert a.delegated == 0 and a.operators >= 3 and all("::" in op for op, _ in a.operator_calls)
    doubled = next(c for c in program_calls(programs.multi.pte) if c.method == "doubled")
    assert dict(doubled.operator_calls)["aten::mul.out"] == 1


def test_a_file_alone(programs, tmp_path):
    shutil.copy(programs.xa.pte, tmp_path / "xa.pte")
    found = read_file_insight(tmp_path / "xa.pte")
    assert found.program is None and not found.recorded and found.insight.delegation is None
    (point,) = found.insight.memory[0].io
    assert (point.at, point.inputs, point.outputs) == (BOUND, 4 * 4, 3 * 4)  # Linear(4, 8) -> Linear(8, 3) on ones(1, 4)
    assert found.insight.size.pte == programs.xa.pte.stat().st_size and found.insight.size.ptd == ()
    assert found.describe()[0] == "calls forward: 1 delegate calls (XnnpackBackend ×1), 0 operator calls"


def test_with_the_build_record_beside_it(programs, tmp_path):
    for path in (programs.xa.pte, programs.xa.ptd, programs.folder / "ptebuild.json"):
        shutil.copy(path, tmp_path / path.name)
    found = read_file_insight(tmp_path / "xa.pte")
    assert found.program == "xa" and not found.recorded
    assert found.insight.size.ptd == (WeightsFile(programs.xa.ptd.name, programs.xa.ptd.stat().st_size),)
    record = json.loads((tmp_path / "ptebuild.json").read_text())
    record["targets"]["xa"]["insight"] = figures().to_json()
    (tmp_path / "ptebuild.json").write_text(json.dumps(record))
    found = read_file_insight(tmp_path / "xa.pte")
    assert found.recorded and found.insight.delegation == figures().delegation
    assert found.insight.size.pte == programs.xa.pte.stat().st_size  # sizes are the file's, not the record's
    assert any("mutable buffers 256 B (cache float32[4, 16])" in line for line in found.describe())
    (tmp_path / "ptebuild.json").write_text("{")
    broken = read_file_insight(tmp_path / "xa.pte")
    assert broken.program is None and broken.notes[0].startswith("the build record beside it is not used:")
