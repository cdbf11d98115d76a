"""The part every structural check shares: the ``.pte``'s methods against the manifest and eager
PyTorch, and the delegate calls of a method (on the session's Vulkan program)."""

from __future__ import annotations

import dataclasses

import pytest
from mobile_programs import make_model

from ptebuild.errors import CheckError
from ptebuild.lowering.structure import check_method_io, compatible, delegate_calls, method_plans


def _program(mobile_build):
    from ptebuild.manifest import load_manifest

    return next(p for p in load_manifest(mobile_build.manifest).programs if p.name == "duo_vulkan")


def test_methods_inputs_and_outputs_match(mobile_build):
    from ptebuild.runtime.pte_file import open_pte

    program = _program(mobile_build)
    with open_pte(mobile_build.out / "duo_vulkan.pte") as pte:
        plans = method_plans(pte, program)
        for method in program.methods:
            check_method_io(make_model(), program, method, plans[method.name])
        calls, kernels = delegate_calls(plans["encode"])
    assert [(c.delegate, len(c.args)) for c in calls] == [(0, 2)] and kernels == 0


def test_a_missing_method_an_other_input_and_an_extra_output_are_caught(mobile_build):
    from ptebuild.runtime.pte_file import open_pte

    program = _program(mobile_build)
    renamed = dataclasses.replace(program, methods=(dataclasses.replace(program.methods[0], name="predict"),))
    model = make_model()
    with open_pte(mobile_build.out / "duo_vulkan.pte") as pte:
        with pytest.raises(CheckError, match=r"^programs\.duo_vulkan: the \.pte has no method 'predict' \(it has decode, encode\); this is a bug in ptebuild"):
            method_plans(pte, renamed)
        plans = method_plans(pte, program)
        decode = program.methods[0]
        wider = dataclasses.replace(decode, inputs=(dataclasses.replace(decode.inputs[0], shape=("batch", 17)),))
        with pytest.raises(CheckError, match=r"method 'decode' input 0 is float32\[4, 16\] in the \.pte, expected float32\[4, 17\] "
                                             r"\(at \{'batch': 4\}\)"):
            check_method_io(model, program, wider, plans["decode"])
        model.decode = lambda h: (model.head(h), h)
        with pytest.raises(CheckError, match=r"method 'decode' takes 1 tensor outputs in the \.pte, eager PyTorch returns 2; make the method return the same outputs at every size$"):
            check_method_io(model, program, decode, plans["decode"])


@pytest.mark.parametrize(("dtype", "other", "expected"), [
    ("float32", "float16", True), ("int64", "int32", True), ("float32", "int32", False), ("bool", "bool", True),
    ("bool", "uint8", False),
])
def test_compatible_dtypes(dtype, other, expected):
    assert compatible(dtype, other) is expected

