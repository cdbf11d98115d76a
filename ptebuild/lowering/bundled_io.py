"""A program's test cases, bundled with it: ``<program>.bpte``, ExecuTorch's BundledProgram.

Runs in a worker: imports torch and executorch (``executorch.devtools.bundled_program``). The
test cases are the check's (:func:`~ptebuild.lowering.examples.check_sizes`): for every method,
its example inputs at the example size and at each dynamic dim's min and max, then its samples
(:mod:`~ptebuild.lowering.samples`), with eager
PyTorch's outputs for them: those of the model the check compares with
(:meth:`~ptebuild.backends.base.Backend.reference_model`; for an XNNPACK 8da4w program torchao's
quantized eager model, as the float model's outputs are 4-bit weights' error away), so that a
device verifies the program at the check's tolerance. A device loads the ``.bpte`` and verifies the program with
ExecuTorch's own C++ API (``load_bundled_input``, ``verify_method_outputs``) before trusting it.

The ``.bpte`` is built from the ``.pte`` file as written (``BundledProgram(None, suites,
pte_file_path=...)``, which embeds its bytes unchanged). That constructor checks nothing, so
the test cases are checked here first against the ``.pte`` (:func:`~ptebuild.runtime.bpte_file.
check_suites`: method names, number and dtypes of inputs and outputs).

Reproducible bytes: executorch's serializer gives the same bytes for the same suites (one
process or two, any hash seed), and the expected outputs are computed on one thread, so that
the thread count (``build --reproduce`` changes it) cannot change how a reduction adds up. They are
eager PyTorch's arithmetic on this CPU: another CPU family may round the last bit otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from ptebuild.errors import BuildError
from ptebuild.lowering.binding import call_method
from ptebuild.lowering.check import flatten_outputs
from ptebuild.lowering.examples import check_inputs, check_sizes
from ptebuild.plan import ProgramPlan
from ptebuild.runtime.bpte_file import BundledCase, BundledSuite, BundledTensor, BundledValue, check_suites

#: torch dtype name -> executorch ``ScalarType`` code (``scalar_type.fbs``).
SCALAR_TYPES = {
    "uint8": 0, "int8": 1, "int16": 2, "int32": 3, "int64": 4, "float16": 5, "float32": 6, "float64": 7,
    "bool": 11, "bfloat16": 15,
}


def bundled_cases(model: Any, program: ProgramPlan, samples: Mapping[str, list[tuple[Any, ...]]] | None = None,
                  ) -> dict[str, list[tuple[tuple[Any, ...], list[Any]]]]:
    """Method -> ``(inputs, eager outputs)`` at each size the check runs, then on each of the
    method's samples, computed on one thread."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cases: dict[str, list[tuple[tuple[Any, ...], list[Any]]]] = {}
        for method in program.methods:
            own = list((samples or {}).get(method.name, ()))
            generated = [check_inputs(program, method, sizes, own) for sizes in check_sizes(method)]
            for inputs in generated + own:
                with torch.no_grad():
                    expected = flatten_outputs(call_method(model, method, inputs, program.model))
                cases.setdefault(method.name, []).append((inputs, [t.detach().contiguous() for t in expected]))
        return cases
    finally:
        torch.set_num_threads(threads)


def write_bpte(model: Any, program: ProgramPlan, pte: Path, out: BinaryIO,
               samples: Mapping[str, list[tuple[Any, ...]]] | None = None) -> None:
    """Write ``<program>.bpte`` to ``out`` (a binary file object, such as a store's blob
    writer): the ``.pte`` at ``pte`` with its test cases (the generated inputs at each check
    size, then the methods' ``samples``).

    Raises BuildError (located at the program) when a test case does not fit the program or
    executorch cannot serialize it.
    """
    from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
    from executorch.devtools.bundled_program.core import BundledProgram
    from executorch.devtools.bundled_program.serialize import serialize_from_bundled_program_to_flatbuffer

    location = f"programs.{program.name}"
    cases = bundled_cases(model, program, samples)
    problems = check_suites(pte, [_described(method, pairs) for method, pairs in cases.items()])
    if problems:
        raise BuildError(f"bundle_io: {problems[0]}", location=location)
    suites = [
        MethodTestSuite(
            method_name=method,
            test_cases=[MethodTestCase(inputs=list(inputs), expected_outputs=list(outputs)) for inputs, outputs in pairs],
        )
        for method, pairs in sorted(cases.items())
    ]
    try:
        data = serialize_from_bundled_program_to_flatbuffer(BundledProgram(None, suites, pte_file_path=str(pte)))
    except Exception as exc:
        raise BuildError(f"bundle_io: executorch could not bundle the test cases: {type(exc).__name__}: {exc}; "
                         "set bundle_io = false for this program",
                         location=location) from exc
    out.write(data)


def _described(method: str, pairs: list[tuple[tuple[Any, ...], list[Any]]]) -> BundledSuite:
    """The test cases as :mod:`~ptebuild.runtime.bpte_file` values (no data), for the check."""
    return BundledSuite(method, tuple(BundledCase(tuple(map(_value, inputs)), tuple(map(_value, outputs))) for inputs, outputs in pairs))


def _value(value: Any) -> BundledValue:
    import torch

    if isinstance(value, torch.Tensor):
        code = SCALAR_TYPES.get(str(value.dtype).removeprefix("torch."), -1)
        return BundledValue("Tensor", tensor=BundledTensor(code, tuple(value.shape), tuple(range(value.dim())), b""))
    if isinstance(value, bool):
        return BundledValue("Bool", scalar=value)
    if isinstance(value, int):
        return BundledValue("Int", scalar=value)
    if isinstance(value, float):
        return BundledValue("Double", scalar=value)
    return BundledValue(f"unsupported {type(value).__name__}")
