"""What a ``.pte`` alone shows of its delegation: its delegate calls and operator calls."""

from __future__ import annotations

from ptebuild.insight.calls import MethodCalls, program_calls


def test_an_xnnpack_program_calls_its_delegate_and_a_portable_one_kernels(programs):
    (xa,) = program_calls(programs.xa.pte)
    assert xa.delegate_calls == (("XnnpackBackend", 1),) and xa.operators == 0
    assert xa.describe() == "1 delegate calls (XnnpackBackend ×1), 0 operator calls"
    (a,) = program_calls(programs.a.pte)
    assert a.delegated == 0 and a.operators >= 3
    assert all("::" in op for op, _ in a.operator_calls)
    assert MethodCalls.from_json("forward", a.to_json()) == a


def test_every_method_in_file_order(programs):
    from ptebuild.runtime.pte_file import open_pte

    with open_pte(programs.multi.pte) as pte:
        names = [plan.name() for plan in pte.execution_plans()]
    calls = program_calls(programs.multi.pte)
    assert [c.method for c in calls] == names
    doubled = next(c for c in calls if c.method == "doubled")
    assert dict(doubled.operator_calls)["aten::mul.out"] == 1
