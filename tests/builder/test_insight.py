"""A program's figures joined from its action result and its published files, the files' half
kept in the cache's memo (a no-op build reads no flatbuffer)."""

from __future__ import annotations

import shutil

from ptebuild.builder.insight import InsightReader
from ptebuild.hashing import hash_file
from ptebuild.insight.program import ProgramInsight
from ptebuild.insight.sizes import WeightsFile
from ptebuild.results import OutputFile
from ptebuild.runtime.pte_insight import pte_split


class Memo(dict):
    def memo_get(self, key):
        return self.get(key)

    def memo_put(self, key, document):
        self[key] = document


def figure_documents(memo):
    """The memo's documents less ptebuild's import graph (kept there by the reader's code digest)."""
    return [d for d in memo.values() if "graph" not in d]


def _outputs(*paths):
    return tuple(OutputFile(p.name, *hash_file(p)) for p in paths)


def test_the_files_half_is_read_once_and_joined_with_the_workers(programs, tmp_path):
    for path in (programs.xa.pte, programs.xa.ptd):
        shutil.copy(path, tmp_path / path.name)
    outputs = _outputs(tmp_path / programs.xa.pte.name, tmp_path / programs.xa.ptd.name)
    memo = Memo()
    reader = InsightReader(tmp_path, memo, hash_file)
    worker = {"delegation": {"methods": {"forward": {"delegated": {"XnnpackBackend": {"subgraphs": 1, "operators": {"aten_linear_default": 2}}},
                                                     "non_delegated": {"getitem": 1}}}}, "size": None, "memory": {}}
    worker = ProgramInsight.from_json(worker)
    figures = reader.of(worker, outputs, {programs.xa.ptd.name: ("other",)})
    assert figures.delegation.fraction == 1.0
    assert figures.size.pte == programs.xa.pte.stat().st_size
    assert figures.size.ptd == (WeightsFile(programs.xa.ptd.name, programs.xa.ptd.stat().st_size, ("other",)),)
    assert figures.planned_bytes and figures.planned_bytes > 0 and len(figure_documents(memo)) == 1
    (tmp_path / programs.xa.pte.name).write_bytes(b"gone")  # the memo answers: the bytes in place are these (the caller checked)
    assert InsightReader(tmp_path, memo, hash_file).of(worker, outputs).size == figures.size.with_weights(
        [WeightsFile(programs.xa.ptd.name, programs.xa.ptd.stat().st_size)])


def test_no_worker_half_and_an_unreadable_file(programs, tmp_path):
    shutil.copy(programs.a.pte, tmp_path / "a.pte")
    reader = InsightReader(tmp_path, None, hash_file)
    figures = reader.of(None, _outputs(tmp_path / "a.pte"))
    assert figures.delegation is None and figures.size == pte_split(programs.a.pte)
    (tmp_path / "bad.pte").write_bytes(b"not a program")
    assert reader.of(ProgramInsight(), _outputs(tmp_path / "bad.pte")) == ProgramInsight()


def test_the_memo_is_keyed_over_the_code_that_reads_the_files(programs, tmp_path):
    """An edit to any module that reads a ``.pte``'s figures must not leave old figures in the memo:
    every module of ptebuild that reading them runs (in a fresh interpreter) is in the memo's key."""
    import json
    import subprocess
    import sys

    from ptebuild import own_code
    from ptebuild.builder.insight import READERS

    script = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        "from ptebuild.builder.insight import InsightReader\n"
        "from ptebuild.hashing import hash_file\n"
        "from ptebuild.results import OutputFile\n"
        "from pathlib import Path\n"
        "pte = Path(sys.argv[1])\n"
        "InsightReader(pte.parent, None, hash_file).of({}, (OutputFile(pte.name, *hash_file(pte)),))\n"
        "print(json.dumps(sorted(m for m in set(sys.modules) - before if m.startswith('ptebuild'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(programs.xa.pte)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    ran = {own_code.ROOT.joinpath(*m.split(".")[1:]) for m in json.loads(done.stdout)}
    ran -= {own_code.ROOT.joinpath("hashing"), own_code.ROOT.joinpath("results")}  # the script's own, not the reader's
    keyed = {p.with_suffix("") if p.name != "__init__.py" else p.parent for p in own_code.closure_files(READERS)}
    assert ran and ran <= keyed, sorted(str(p) for p in ran - keyed)
