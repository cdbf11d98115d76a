"""The size split as a value: its parts, its weights files, unique bytes, JSON."""

from __future__ import annotations

from ptebuild.insight.sizes import SizeSplit, WeightsFile, unique_bytes


def test_parts_weights_files_and_unique_bytes():
    split = SizeSplit(pte=1_000, plan=600, constants=0, named_data=300, delegates=(("XnnpackBackend", 90),), padding=10)
    assert split.pte_parts() == [("plan", 600), ("named data", 300), ("delegate XnnpackBackend", 90), ("padding", 10)]
    split = split.with_weights([WeightsFile("b.ptd", 10, ("other",)), WeightsFile("a.ptd", 30)])
    assert [f.name for f in split.ptd] == ["a.ptd", "b.ptd"] and split.ptd_bytes == 40 and split.delegate_bytes == 90
    assert split.parts()[-2:] == [("a.ptd", 30), ("b.ptd", 10)]
    assert split.largest_ptd == WeightsFile("a.ptd", 30)
    other = SizeSplit(pte=100, plan=100, ptd=(WeightsFile("b.ptd", 10, ("a",)),))
    assert unique_bytes([split, other]) == 1_000 + 40 + 100  # b.ptd once
    assert SizeSplit.from_json(split.to_json()) == split
