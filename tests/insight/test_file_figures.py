"""What ``inspect`` shows of a ``.pte``'s figures: the file's own, and the build record's beside it."""

from __future__ import annotations

import json
import shutil

from figures_data import figures

from ptebuild.insight.file_figures import read_file_figures
from ptebuild.insight.memory import BOUND


def test_a_file_alone(programs, tmp_path):
    shutil.copy(programs.xa.pte, tmp_path / "xa.pte")
    found = read_file_figures(tmp_path / "xa.pte")
    assert found.program is None and not found.recorded and found.figures.delegation is None
    assert found.calls[0].delegate_calls == (("XnnpackBackend", 1),)
    (point,) = found.figures.memory[0].io
    assert (point.at, point.inputs, point.outputs) == (BOUND, 4 * 4, 3 * 4)  # Linear(4, 8) -> Linear(8, 3) on ones(1, 4)
    assert found.figures.size.pte == programs.xa.pte.stat().st_size and found.figures.size.ptd == ()
    assert found.describe()[0] == "calls forward: 1 delegate calls (XnnpackBackend ×1), 0 operator calls"


def test_with_the_build_record_beside_it(programs, tmp_path):
    for path in (programs.xa.pte, programs.xa.ptd, programs.folder / "ptebuild.json"):
        shutil.copy(path, tmp_path / path.name)
    found = read_file_figures(tmp_path / "xa.pte")
    assert found.program == "xa" and not found.recorded
    assert [f.name for f in found.figures.size.ptd] == [programs.xa.ptd.name]
    record = json.loads((tmp_path / "ptebuild.json").read_text())
    record["targets"]["xa"]["figures"] = figures().to_json()
    (tmp_path / "ptebuild.json").write_text(json.dumps(record))
    found = read_file_figures(tmp_path / "xa.pte")
    assert found.recorded and found.figures.delegation == figures().delegation
    assert found.figures.size.pte == programs.xa.pte.stat().st_size  # sizes are the file's, not the record's
    assert any("mutable buffers 256 B (cache float32[4, 16])" in line for line in found.describe())
    (tmp_path / "ptebuild.json").write_text("{")
    broken = read_file_figures(tmp_path / "xa.pte")
    assert broken.program is None and broken.notes[0].startswith("the build record beside it is not used:")
