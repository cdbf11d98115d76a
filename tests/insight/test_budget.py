"""Budgets: sizes as people write them, limits merged from the defaults, and one line for each
limit a program breaks, with the figure, the budget and the fix."""

from __future__ import annotations

import pytest
from insight_data import figures

from ptebuild.insight.budget import judge, merged_budget, parse_size
from ptebuild.insight.program import ProgramInsight
from ptebuild.plan import Limit


@pytest.mark.parametrize(("text", "size"), [
    (1024, 1024), ("2 MiB", 2 * 1024**2), ("2MiB", 2 * 1024**2), ("512 KiB", 512 * 1024), ("1.5 GiB", 3 * 1024**3 // 2),
    ("500 KB", 500_000), ("2 MB", 2_000_000), ("100", 100), ("0", 0),
])
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["two MiB", "2 MiBs", "-1", -1, True, "", "1e6"])
def test_bad_sizes(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


def test_a_programs_limits_override_the_defaults_one_by_one():
    budget = merged_budget({"max_pte": 100, "min_delegated": 0.5}, {"max_pte": 200, "max_ptd": 300}, "p")
    assert budget.limits == (Limit("max_pte", 200, "programs.p.budget"), Limit("max_ptd", 300, "programs.p.budget"),
                             Limit("min_delegated", 0.5, "defaults.budget"))
    assert merged_budget(None, {}, "p") is None
    assert budget.limit("max_pte").location == "programs.p.budget.max_pte" and budget.limit("max_planned_memory") is None


def test_within_budget_is_no_overrun():
    budget = merged_budget(None, {"max_pte": 6_000, "max_ptd": 40_000, "min_delegated": 0.9, "max_planned_memory": 37_184}, "p")
    assert judge(figures(), budget, "p.pte") == ()


def test_each_limit_broken_is_one_line_at_its_place():
    budget = merged_budget({"max_pte": 5_000, "min_delegated": 0.95},
                           {"max_ptd": 32 * 1024, "max_planned_memory": 32 * 1024}, "p")
    found = judge(figures(shared_with=("q",)), budget, "p.pte")
    assert [o.limit.location for o in found] == [
        "defaults.budget.max_pte", "programs.p.budget.max_ptd", "defaults.budget.min_delegated", "programs.p.budget.max_planned_memory"]
    pte, ptd, delegated, planned = (o.message for o in found)
    assert pte == ("p.pte is 5.9 KiB (6,000 bytes), over the budget of 4.9 KiB (5,000 bytes) (the largest part: delegate XnnpackBackend "
                   "2.9 KiB); quantize the weights the delegate holds, or keep them in a .ptd (data_name), or raise the budget")
    assert ptd.startswith("weights.ptd is 39.1 KiB (40,000 bytes), shared with q, over the budget of 32.0 KiB (32,768 bytes)")
    assert delegated == ("90.0% of its operator nodes are delegated, under the budget of 95% (left to kernels: aten_mean_dim ×1); "
                         "make the model use operators the backend takes, or lower the budget")
    assert planned.startswith("the methods plan 36.3 KiB (37,184 bytes) together (forward 36.3 KiB), over the budget of 32.0 KiB")


def test_figures_that_are_missing_cannot_pass():
    budget = merged_budget(None, {"max_pte": 1, "min_delegated": 0.5}, "p")
    messages = [o.message for o in judge(ProgramInsight(), budget, "p.pte")]
    assert messages[0].startswith("no size figures for p.pte") and messages[1].startswith("no delegation figures")


def test_a_program_without_operator_nodes_is_not_a_fallback():
    from ptebuild.insight.delegation import Delegation, MethodDelegation

    empty = ProgramInsight(delegation=Delegation((MethodDelegation("forward", (), ()),)))
    assert judge(empty, merged_budget(None, {"min_delegated": 1.0}, "p"), "p.pte") == ()


def test_the_schema_takes_the_sizes_the_manifest_takes():
    import re

    from ptebuild.manifest.schema import json_schema

    schema = json_schema()
    assert schema["$defs"]["Defaults"]["properties"]["budget"] and schema["$defs"]["ProgramSpec"]["properties"]["etrecord"]
    budget = schema["$defs"]["BudgetSpec"]
    assert budget["additionalProperties"] is False
    assert set(budget["properties"]) == {"max_pte", "max_ptd", "min_delegated", "max_planned_memory", "methods"}
    (size, _null) = budget["properties"]["max_pte"]["anyOf"]
    integer, string = size["anyOf"]
    assert integer == {"type": "integer", "minimum": 0}
    for text in ("2 MiB", "2MiB", "512 KiB", "1.5 GiB", "500 KB", "2 MB", "100", "7b"):
        assert re.search(string["pattern"], text), text
        parse_size(text)
    for text in ("two MiB", "2 MiBs", "-1", "", "1e6"):
        assert not re.search(string["pattern"], text), text
    fraction = budget["properties"]["min_delegated"]["anyOf"][0]
    assert (fraction["minimum"], fraction["maximum"]) == (0, 1)


def test_a_methods_limits_bound_that_method_alone_its_own_over_the_defaults():
    budget = merged_budget({"methods": {"forward": {"max_planned_memory": 1}, "other": {"min_delegated": 1.0}}},
                           {"methods": {"forward": {"min_delegated": 0.5, "max_planned_memory": None}}}, "p", ["forward"])
    assert budget.limits == (Limit("min_delegated", 0.5, "programs.p.budget.methods.forward", "forward"),
                             Limit("max_planned_memory", 1, "defaults.budget.methods.forward", "forward"))
    assert budget.limits[0].location == "programs.p.budget.methods.forward.min_delegated"
    assert merged_budget({"methods": {"other": {"min_delegated": 1.0}}}, None, "p", ["forward"]) is None


def test_a_method_over_its_limit_is_one_line_naming_it():
    budget = merged_budget(None, {"methods": {"forward": {"min_delegated": 0.95, "max_planned_memory": 32 * 1024}}}, "p", ["forward"])
    delegated, planned = (o.message for o in judge(figures(), budget, "p.pte"))
    assert delegated == ("90.0% of method 'forward''s operator nodes are delegated, under the budget of 95% (left to kernels: "
                         "aten_mean_dim ×1); make it use operators the backend takes, or lower the budget")
    assert planned == ("method 'forward' plans 36.3 KiB (37,184 bytes), over the budget of 32.0 KiB (32,768 bytes); "
                       "lower its dynamic dims' max, or raise the budget")
    within = merged_budget(None, {"methods": {"forward": {"min_delegated": 0.9, "max_planned_memory": 37_184}}}, "p", ["forward"])
    assert judge(figures(), within, "p.pte") == ()
    missing = merged_budget(None, {"methods": {"absent": {"min_delegated": 0.1, "max_planned_memory": 1}}}, "p", ["absent"])
    assert [o.message.split(" (")[0] for o in judge(figures(), missing, "p.pte")] == [
        "no delegation figures for method 'absent'", "no memory figures for method 'absent'"]
