"""Verify a ``.bpte`` with ExecuTorch's own Python API; run it in a fresh process.

    python bpte_verify.py FILE.bpte [FILE.ptd] [--rtol R] [--atol A]

Without a ``.ptd``: ``BundledModule.verify_result_with_bundled_expected_output`` for every test
case (C++ ``load_bundled_input``, execute, ``verify_method_outputs``). With one (executorch
1.5.1's ``BundledModule`` cannot be given a data file): the bundled program is loaded with it
(``_load_for_executorch_from_bundled_program``), every test case as executorch's own
deserializer reads it is run, and each output compared as ``verify_method_outputs`` does: same
dtype and sizes, ``|a - b| <= atol + rtol * |b|``. A fresh process because executorch 1.5.1
crashes (SIGSEGV) running an XNNPACK program whose weights are in a ``.ptd`` without it.
Prints one line per case; exit 1 if any fails.
"""

from __future__ import annotations

import argparse
import sys

import torch

DTYPES = {0: torch.uint8, 1: torch.int8, 3: torch.int32, 4: torch.int64, 5: torch.float16, 6: torch.float32, 7: torch.float64,
          11: torch.bool, 15: torch.bfloat16}


def as_torch(value):
    """A test case's input as ``run_method`` takes it: a tensor, or a scalar (an exported scalar input)."""
    tensor = value.val
    for scalar in ("double_val", "int_val", "bool_val"):
        if hasattr(tensor, scalar):
            return getattr(tensor, scalar)
    dtype = DTYPES[tensor.scalar_type]
    flat = torch.frombuffer(bytearray(tensor.data), dtype=dtype) if tensor.data else torch.empty(0, dtype=dtype)
    return flat.reshape(tensor.sizes)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("bpte")
    parser.add_argument("ptd", nargs="?")
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--atol", type=float, default=1e-8)
    args = parser.parse_args()
    from executorch.devtools.bundled_program.serialize import deserialize_from_flatbuffer_to_bundled_program
    from executorch.extension.pybindings import portable_lib

    data = open(args.bpte, "rb").read()
    module = portable_lib._load_bundled_program_from_buffer(data)
    suites = deserialize_from_flatbuffer_to_bundled_program(data).method_test_suites
    failed = 0
    if args.ptd is None:
        for suite in suites:
            for index in range(len(suite.test_cases)):
                try:
                    module.verify_result_with_bundled_expected_output(suite.method_name, index, rtol=args.rtol, atol=args.atol)
                    print(f"{suite.method_name}[{index}]: ok (BundledModule)")
                except RuntimeError as exc:
                    failed += 1
                    print(f"{suite.method_name}[{index}]: FAILED: {exc}")
        return 1 if failed else 0
    program = portable_lib._load_for_executorch_from_bundled_program(module, args.ptd)
    for suite in suites:
        for index, case in enumerate(suite.test_cases):
            outputs = program.run_method(suite.method_name, [as_torch(v) for v in case.inputs])
            expected = [as_torch(v) for v in case.expected_outputs]
            ok = len(outputs) == len(expected) and all(
                got.dtype == want.dtype and got.shape == want.shape
                and bool(((got.double() - want.double()).abs() <= args.atol + args.rtol * want.double().abs()).all())
                for got, want in zip(outputs, expected)
            )
            failed += not ok
            print(f"{suite.method_name}[{index}]: {'ok' if ok else 'FAILED'} (with {args.ptd})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
