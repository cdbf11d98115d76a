"""Delegation figures as values: the fraction leaves out tuple access, JSON round-trips, and the
text names what was left to kernels (the counts themselves are checked against ExecuTorch's
``get_delegation_info`` in tests/lowering/test_delegation.py)."""

from __future__ import annotations

import pytest

from ptebuild.insight.delegation import DelegateShare, Delegation, MethodDelegation, counts, operator_of, percent


def _method(name: str = "forward") -> MethodDelegation:
    share = DelegateShare("XnnpackBackend", 2, counts(["aten_convolution_default", "aten_relu_default", "getitem", "aten_linear_default"]))
    return MethodDelegation(name, (share,), counts(["aten_mean_dim", "getitem", "getitem", "aten_sort_default"]))


@pytest.mark.parametrize(("node", "operator"), [
    ("aten_convolution_default", "aten_convolution_default"),
    ("aten_convolution_default_12", "aten_convolution_default"),
    ("getitem_3", "getitem"),
    ("aten_add_tensor_1_2", "aten_add_tensor_1"),
    ("conv2d_", "conv2d_"),
])
def test_a_nodes_operator_is_its_name_without_a_trailing_number(node, operator):
    assert operator_of(node) == operator


def test_counts_and_the_fraction_without_tuple_access():
    method = _method()
    assert (method.delegated_nodes, method.non_delegated_nodes, method.subgraphs) == (4, 4, 2)
    assert method.kernel_nodes() == (3, 2)
    assert method.fraction == pytest.approx(0.6)
    assert method.by_operator()["getitem"] == (1, 2)
    program = Delegation((method, _method("score")))
    assert program.fraction == pytest.approx(0.6) and program.delegated_nodes == 8
    assert program.non_delegated() == (("aten_mean_dim", 2), ("aten_sort_default", 2))
    assert program.backends() == ("XnnpackBackend",)


def test_a_fully_delegated_method_is_all_delegated_and_an_empty_one_is_unknown():
    full = MethodDelegation("forward", (DelegateShare("XnnpackBackend", 1, counts(["aten_linear_default"])),), counts(["getitem"]))
    assert full.fraction == 1.0
    empty = MethodDelegation("forward", (), ())
    assert empty.fraction is None and Delegation((empty,)).fraction is None
    assert Delegation((empty,)).describe() == "no operator nodes" and percent(None) == "-"


def test_json_round_trip():
    program = Delegation((_method(), MethodDelegation("portable", (), counts(["aten_add_tensor"]))))
    document = program.to_json()
    assert document["methods"]["forward"]["delegated"]["XnnpackBackend"] == {
        "subgraphs": 2, "operators": {"aten_convolution_default": 1, "aten_linear_default": 1, "aten_relu_default": 1, "getitem": 1}}
    assert document["methods"]["forward"]["fraction"] == 0.6 and document["methods"]["portable"]["fraction"] == 0.0
    assert Delegation.from_json(document) == program


@pytest.mark.parametrize("bad", [{}, {"methods": []}, {"methods": {"forward": {"delegated": {}}}},
                                 {"methods": {"forward": {"delegated": {"X": {"subgraphs": 1, "operators": []}}, "non_delegated": {}}}}])
def test_malformed_json_raises(bad):
    with pytest.raises((KeyError, TypeError, ValueError)):
        Delegation.from_json(bad)


def test_the_line_names_what_was_left_to_kernels_most_first():
    line = Delegation((_method(),)).describe()
    assert line == "60.0% of 5 operator nodes delegated (XnnpackBackend); left to kernels: aten_mean_dim ×1, aten_sort_default ×1"
