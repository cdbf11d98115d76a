"""The change of a program's figures between two releases, and what got worse."""

from __future__ import annotations

from insight_data import figures

from ptebuild.figures import CheckSummary, read_figures
from ptebuild.insight.compare import FiguresChange


def _checked(*figures):
    """The record's ``checked`` of a check with these figures (forward's output 0 at one size each)."""
    entries = [{"method": "forward", "sizes": {"batch": n}, "output": 0, **f} for n, f in enumerate(figures, 1)]
    return CheckSummary.of(read_figures(e) for e in entries).to_json()


def test_a_release_that_grew_and_fell_back_to_kernels():
    before = figures(pte=6_000, ptd=40_000, delegated=9, left=1, planned=(37_184,))
    after = figures(pte=9_000, ptd=40_000, delegated=6, left=4, planned=(50_000,))
    change = FiguresChange.of(before, after, _checked({"max_abs_error": 1e-6, "cosine": 1.0}), _checked({"max_abs_error": 3e-3, "cosine": 0.9995}))
    assert change.worse() == ["grew", "fell back to kernels", "plans more memory", "checks further from eager"]
    assert change.lines() == [
        ".pte 5.9 KiB -> 8.8 KiB (+50.0%)",
        "delegated 90.0% -> 60.0% (-30.0 points)",
        "planned memory 36.3 KiB -> 48.8 KiB (+34.5%)",
        "check max error 1.00e-06 -> 3.00e-03",
        "check cosine 1.000000 -> 0.999500",
    ]
    document = change.to_json()
    assert document["pte_bytes"] == {"before": 6000.0, "after": 9000.0} and document["worse"][0] == "grew"


def test_the_same_figures_say_nothing_and_missing_ones_are_none():
    same = FiguresChange.of(figures(), figures())
    assert same.worse() == [] and same.lines() == []
    older = FiguresChange.of(None, figures())
    assert older.pte == (None, 6000.0) and older.worse() == []
    assert older.lines()[0] == ".pte - -> 5.9 KiB"
    checked = CheckSummary.of(read_figures(f) for f in [{"method": "forward"}, {"method": "forward", "sizes": {}, "output": 0, "max_abs_error": 0.5, "cosine": 0.9}])
    assert FiguresChange.of(None, figures(), None, checked.to_json()).max_abs_error == (None, 0.5)


def test_noise_in_the_check_is_not_worse():
    from ptebuild.insight.compare import FiguresChange

    noise = FiguresChange.of(figures(), figures(), _checked({"max_abs_error": 5.96e-8, "cosine": 0.9999999}),
                             _checked({"max_abs_error": 8.57e-8, "cosine": 0.9999998}))
    assert noise.worse() == [] and noise.lines() == ["check max error 5.96e-08 -> 8.57e-08"]
    fell = FiguresChange.of(figures(), figures(), _checked({"max_abs_error": 1e-6, "cosine": 1.0}), _checked({"max_abs_error": 1e-6, "cosine": 0.9998}))
    assert fell.worse() == ["checks further from eager"]
