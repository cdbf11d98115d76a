"""Reads a ``.bpte`` (ExecuTorch BundledProgram): a program with the test cases a device verifies it by.

Pure Python; imports neither torch nor executorch. The whole file is read into memory (it holds
the ``.pte`` it bundles).

Spec: executorch ``devtools/bundled_program/schema/bundled_program_schema.fbs`` (file identifier
``BP08`` since v0.2.0, ``BP06`` in v0.1.0; extension ``bpte``), which includes ``scalar_type.fbs``;
``devtools/bundled_program/version.py`` (``BUNDLED_PROGRAM_SCHEMA_VERSION = 2``). The runtime
recognises a bundle by its identifier alone (``bundled_program::is_bundled_program``). There is
no extended header, unlike a ``.pte`` or ``.ptd``. Layout, little-endian::

    0..4   u32 offset of the root BundledProgram table
    4..8   file identifier "BP08"

Tables read (field index: name, type):

- ``BundledProgram`` {0: version u32, 1: method_test_suites [BundledMethodTestSuite],
  2: program [u8] (force_align 32): the ``.pte``'s bytes, unchanged}
- ``BundledMethodTestSuite`` {0: method_name string, 1: test_cases [BundledMethodTestCase]}
  (executorch writes the suites sorted by method name)
- ``BundledMethodTestCase`` {0: inputs [Value], 1: expected_outputs [Value]}
- ``Value`` {0: val_type u8 (union ``ValueUnion``: 1 Tensor, 2 Int, 3 Bool, 4 Double), 1: val}
- ``Tensor`` {0: scalar_type i8 (executorch ``ScalarType``), 1: sizes [i32], 2: data [u8]
  (force_align 16; contiguous, in ``dim_order``), 3: dim_order [u8]}
- ``Int`` {0: int_val i64}, ``Bool`` {0: bool_val u8}, ``Double`` {0: double_val f64}
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ptebuild.errors import FormatError
from ptebuild.runtime.flatbuffer import U8, U32, FlatbufferView, Table

if TYPE_CHECKING:
    from ptebuild.runtime.pte_file import Value

FILE_IDENTIFIER = b"BP08"
SCHEMA_VERSION = 2
"""``BundledProgram.version`` as executorch 1.5.1 writes it."""
_IDENTIFIER_SLICE = slice(4, 8)
_MIN_SIZE = 8

_I8 = struct.Struct("<b")
_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")

#: ``ValueUnion`` tags -> table name.
VALUE_TYPES = {1: "Tensor", 2: "Int", 3: "Bool", 4: "Double"}


@dataclass(frozen=True)
class BundledTensor:
    """A tensor of a test case: its ``ScalarType`` code, sizes, dim order and contiguous bytes."""

    scalar_type: int
    sizes: tuple[int, ...]
    dim_order: tuple[int, ...]
    data: bytes


@dataclass(frozen=True)
class BundledValue:
    """One input or expected output. ``kind``: ``Tensor``, ``Int``, ``Bool``, ``Double`` (``"type N"``
    for an unknown tag, ``"None"`` when empty); ``tensor`` or ``scalar`` is set accordingly."""

    kind: str
    tensor: BundledTensor | None = None
    scalar: int | float | bool | None = None


@dataclass(frozen=True)
class BundledCase:
    inputs: tuple[BundledValue, ...]
    expected_outputs: tuple[BundledValue, ...]


@dataclass(frozen=True)
class BundledSuite:
    method: str
    cases: tuple[BundledCase, ...]


@dataclass(frozen=True)
class BpteFile:
    """What a ``.bpte`` holds: its schema version, test suites, and where its program lies."""

    path: Path
    version: int
    suites: tuple[BundledSuite, ...]
    program_offset: int
    """File offset of the bundled ``.pte``'s first byte."""
    program_size: int

    def suite(self, method: str) -> BundledSuite | None:
        return next((s for s in self.suites if s.method == method), None)

    def read_program(self) -> bytes:
        """The bundled ``.pte``'s bytes."""
        with open(self.path, "rb") as f:
            f.seek(self.program_offset)
            return f.read(self.program_size)


def is_bpte(head: bytes) -> bool:
    """True if ``head`` (a file's first 8 bytes or more) carries the BundledProgram identifier."""
    return head[_IDENTIFIER_SLICE] == FILE_IDENTIFIER


def read_bpte(path: str | Path) -> BpteFile:
    """Reads the test suites of a ``.bpte`` and where its program lies.

    Raises:
        FormatError: not a BP08 bundle, or truncated/corrupt; the message names the file,
            the field and the offset.
        OSError: the file cannot be opened.
    """
    path = Path(path)
    return parse_bpte(path.read_bytes(), path)


def parse_bpte(data: bytes, path: str | Path) -> BpteFile:
    """:func:`read_bpte` of a ``.bpte``'s bytes; ``path`` names it (and is where
    :meth:`BpteFile.read_program` reads). Raises FormatError."""
    path = Path(path)
    source = str(path)
    if len(data) < _MIN_SIZE:
        raise FormatError(f"{source}: truncated: {len(data)} bytes, too short for a .bpte")
    identifier = data[_IDENTIFIER_SLICE]
    if identifier != FILE_IDENTIFIER:
        raise FormatError(
            f"{source}: not a .bpte file: identifier {identifier!r} at offset 4, expected {FILE_IDENTIFIER!r}"
        )
    root = FlatbufferView(data, source).root("BundledProgram")
    version = root.scalar(0, "version", U32)
    suites = tuple(
        BundledSuite(
            suite.string(0, "method_name") or "",
            tuple(_case(case) for case in suite.tables(1, "test_cases")),
        )
        for suite in root.tables(1, "method_test_suites")
    )
    offset, size = _vector_range(root, 2, "program")
    return BpteFile(path, version, suites, offset, size)


def _vector_range(table: Table, index: int, name: str) -> tuple[int, int]:
    """``(offset, length)`` of a ``[u8]`` field; FormatError when it is absent."""
    found = table.byte_vector_range(index, name)
    if found is None:
        raise FormatError(f"{table.view.source}: {table.path} has no {name}")
    return found


def _case(case: Table) -> BundledCase:
    return BundledCase(
        tuple(_value(v) for v in case.tables(0, "inputs")),
        tuple(_value(v) for v in case.tables(1, "expected_outputs")),
    )


def _value(value: Table) -> BundledValue:
    tag = value.scalar(0, "val_type", U8)
    kind = VALUE_TYPES.get(tag, f"type {tag}")
    val = value.table(1, "val")
    if val is None:
        return BundledValue("None" if tag == 0 else kind)
    if kind == "Tensor":
        tensor = BundledTensor(
            val.scalar(0, "scalar_type", _I8),
            tuple(val.scalars(1, "sizes", _I32)),
            tuple(val.scalars(3, "dim_order", U8)),
            val.byte_vector(2, "data") or b"",
        )
        return BundledValue(kind, tensor=tensor)
    if kind == "Int":
        return BundledValue(kind, scalar=val.scalar(0, "int_val", _I64))
    if kind == "Bool":
        return BundledValue(kind, scalar=bool(val.scalar(0, "bool_val", U8)))
    if kind == "Double":
        return BundledValue(kind, scalar=float(val.float_scalar(0, "double_val", _F64)))
    return BundledValue(kind)


def check_suites(pte: str | Path, suites: Sequence[BundledSuite]) -> list[str]:
    """What does not fit between test suites and the ``.pte`` at ``pte``, one line each (empty: all fits).

    executorch's ``BundledProgram`` built from a file checks nothing, and a runtime finds a wrong
    case only when it runs it (``Input 0 has unexpected scalar type``, ``No method named ...``).
    Checked here: each suite's method exists; each case has as many inputs as the method takes,
    each a tensor of the input's dtype and rank (or an Int, Bool or Double where the method takes
    one); and as many expected outputs as it returns, each a tensor of the output's dtype.

    Raises FormatError / OSError when the ``.pte`` cannot be read.
    """
    from ptebuild.runtime.pte_file import open_pte

    pte = Path(pte)
    problems: list[str] = []
    with open_pte(pte) as reader:
        plans = {plan.name(): plan for plan in reader.execution_plans()}
        for suite in suites:
            plan = plans.get(suite.method)
            if plan is None:
                problems.append(f"method {suite.method!r}: {pte.name} has no such method (it has {', '.join(sorted(plans))})")
                continue
            values = plan.values()
            inputs = [_plan_value(values, i) for i in plan.inputs()]
            outputs = [_plan_value(values, i) for i in plan.outputs()]
            for number, case in enumerate(suite.cases):
                where = f"method {suite.method!r} test case {number}"
                if len(case.inputs) != len(inputs):
                    problems.append(f"{where}: {len(case.inputs)} inputs, the program takes {len(inputs)}")
                else:
                    problems += [f"{where} input {i}: {p}" for i, (got, want) in enumerate(zip(case.inputs, inputs))
                                 if (p := _mismatch(got, want, output=False))]
                if len(case.expected_outputs) != len(outputs):
                    problems.append(f"{where}: {len(case.expected_outputs)} expected outputs, the program returns {len(outputs)}")
                else:
                    problems += [f"{where} expected output {i}: {p}" for i, (got, want) in enumerate(zip(case.expected_outputs, outputs))
                                 if (p := _mismatch(got, want, output=True))]
    return problems


def _plan_value(values: list[Value], index: int) -> Value | None:
    return values[index] if 0 <= index < len(values) else None


def _mismatch(got: BundledValue, want: Value | None, output: bool) -> str | None:
    if want is None:
        return "the program's value index is out of range"
    if want.kind == "Tensor" and want.tensor is not None:
        if got.tensor is None:
            return f"{got.kind}, the program {'returns' if output else 'takes'} a tensor"
        if got.tensor.scalar_type != want.tensor.scalar_type:
            return f"dtype {_dtype(got.tensor.scalar_type)}, the program's is {_dtype(want.tensor.scalar_type)}"
        if not output and len(got.tensor.sizes) != len(want.tensor.sizes):
            return f"{len(got.tensor.sizes)} dimensions, the program's input has {len(want.tensor.sizes)}"
        return None
    if output:
        return f"the program returns a {want.kind}; expected outputs must be tensors"
    if got.kind != want.kind:
        return f"{got.kind}, the program takes {want.kind}"
    return None


def _dtype(code: int) -> str:
    from ptebuild.runtime.pte_inspection import DTYPES

    return DTYPES.get(code, f"ScalarType {code}")
