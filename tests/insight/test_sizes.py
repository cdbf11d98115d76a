"""The size split of real ``.pte`` files (tests/runtime_programs.py): the parts add up to the file,
a program with its weights inside has them as named data, a delegate's payload is its own part."""

from __future__ import annotations

import pytest

from ptebuild.errors import FormatError
from ptebuild.insight.sizes import SizeSplit, WeightsFile, pte_split, unique_bytes

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


def test_weights_files_and_unique_bytes(programs):
    split = pte_split(programs.a.pte).with_weights([WeightsFile("b.ptd", 10, ("other",)), WeightsFile("a.ptd", 30)])
    assert [f.name for f in split.ptd] == ["a.ptd", "b.ptd"] and split.ptd_bytes == 40
    assert split.largest_ptd == WeightsFile("a.ptd", 30)
    other = SizeSplit(pte=100, plan=100, ptd=(WeightsFile("b.ptd", 10, ("a",)),))
    assert unique_bytes([split, other]) == split.pte + 40 + 100
    assert SizeSplit.from_json(split.to_json()) == split


def test_a_cut_file_is_a_format_error(programs, tmp_path):
    data = programs.xinline.pte.read_bytes()
    cut = tmp_path / "cut.pte"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match="cut.pte"):
        pte_split(cut)
