"""Operator lists for ExecuTorch's selective build: what ``gen_oplist`` writes from a ``.pte``.

Pure Python, read with :func:`~ptebuild.runtime.pte_file.open_pte`; imports neither torch nor
executorch. An embedded team links only the kernels a release's programs call: ExecuTorch's
CMake ``gen_selected_ops(... OPS_FROM_MODEL ...)`` runs
``python -m executorch.codegen.tools.gen_oplist --model_file_path M.pte --output_path OUT``
(executorch ``codegen/tools/gen_oplist.py`` with its C++ helper ``selective_build.cpp``) and
the kernel codegen reads the YAML it writes (``selected_operators.yaml``, torchgen's
``SelectiveBuilder``). :func:`selected_operators_yaml` writes the same bytes for one program
(tested against the real tool), and a deterministic merge for several.

What gen_oplist (executorch 1.5.1) derives from the ``Program`` flatbuffer:

- ``operators``: every entry of every method's ``ExecutionPlan.operators`` (``name``, or
  ``name.overload`` when the overload is not empty), each with ``is_root_operator: true``,
  ``is_used_for_training: true``, ``include_all_overloads: false`` and ``debug_info``: the
  ``--model_file_path`` string as given (ptebuild passes the file name, never a path, so the
  YAML does not depend on where the file lies). Delegated calls are not operators: a program
  that a delegate runs whole lists none (what it needs is the backend's library; what the
  delegate runs, its payload reader says: :func:`delegated_operators`).
- ``et_kernel_metadata``: for every ``KernelCall`` instruction, the kernel key of the call:
  ``v1/`` followed by ``<ScalarType code>;<dim order joined by ','>`` of each of its tensor
  arguments (in argument order; the out tensor is an argument twice, as ``out`` and as the
  result), joined by ``|``. A ``Tensor`` value gives its own; a ``TensorList`` its first item's
  (an empty list gives nothing); an ``OptionalTensorList`` its first item that is a tensor;
  every other value (Int, Bool, Double, IntList, Null...) nothing. gen_oplist builds
  ``"v1/" + "key|" * n`` and drops the last character, so a call without tensor arguments has
  the key ``v1``. Keys are deduplicated and sorted per operator (torchgen's
  ``merge_et_kernel_metadata``).
- constants: ``custom_classes: []``, ``build_features: []``, ``include_all_non_op_selectives:
  false``, ``kernel_metadata: {}``, ``include_all_operators`` (a flag: true makes the build
  non-selective).

The YAML is ``yaml.safe_dump(document, default_flow_style=False)`` (PyYAML: keys sorted,
block style), UTF-8. Merging several programs' lists, ExecuTorch's ``gen_all_oplist`` unions
``debug_info`` through a ``set``, so its order depends on the hash seed; :func:`merge` unions
operators and kernel keys and sorts every list, so a bundle's list has the same bytes anywhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ptebuild.errors import FormatError
from ptebuild.runtime.payload_lookup import reader_for
from ptebuild.runtime.pte_file import ExecutionPlan, Value, open_pte

OPLIST_NAME = "selected_operators.yaml"
"""The file name gen_oplist writes into a folder, and the one a bundle carries."""
KERNEL_KEY_VERSION = "v1"


@dataclass(frozen=True)
class OperatorList:
    """The operators and kernels some programs need. ``kernels``: operator -> sorted kernel keys
    (only operators that an instruction calls); ``debug_info``: operator -> the files that need it."""

    operators: tuple[str, ...] = ()
    kernels: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    debug_info: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))

    def to_document(self, include_all_operators: bool = False) -> dict[str, Any]:
        """The document gen_oplist dumps (see the module docstring)."""
        return {
            "build_features": [],
            "custom_classes": [],
            "et_kernel_metadata": {op: list(keys) for op, keys in sorted(self.kernels.items())},
            "include_all_non_op_selectives": False,
            "include_all_operators": include_all_operators,
            "kernel_metadata": {},
            "operators": {
                op: {
                    "debug_info": list(self.debug_info.get(op, ())),
                    "include_all_overloads": False,
                    "is_root_operator": True,
                    "is_used_for_training": True,
                }
                for op in self.operators
            },
        }

    def to_json(self) -> dict[str, Any]:
        return {"operators": list(self.operators), "kernels": {op: list(k) for op, k in sorted(self.kernels.items())}}


def operator_name(name: str, overload: str) -> str:
    return f"{name}.{overload}" if overload else name


def program_operators(path: str | os.PathLike[str], debug_name: str | None = None) -> OperatorList:
    """The operator list of the ``.pte`` at ``path``; ``debug_name`` (default: its file name) is
    what ``debug_info`` names it by.

    Raises:
        FormatError: not a ``.pte``, truncated or corrupt, or an instruction names an operator or
            value the method does not have.
        OSError: the file cannot be opened.
    """
    path = Path(path)
    name = path.name if debug_name is None else debug_name
    operators: set[str] = set()
    kernels: dict[str, set[str]] = {}
    with open_pte(path) as pte:
        for plan in pte.execution_plans():
            names = [operator_name(op.name, op.overload) for op in plan.operators()]
            operators.update(names)
            for op, key in _kernel_calls(plan, names, str(path)):
                kernels.setdefault(op, set()).add(key)
    return OperatorList(
        tuple(sorted(operators)),
        MappingProxyType({op: tuple(sorted(keys)) for op, keys in sorted(kernels.items())}),
        MappingProxyType(dict.fromkeys(sorted(operators), (name,))),
    )


def _kernel_calls(plan: ExecutionPlan, names: list[str], source: str) -> Iterable[tuple[str, str]]:
    values: list[Value] | None = None
    for chain in plan.chains():
        for number, instruction in enumerate(chain.instructions):
            if instruction.kind != "KernelCall" or not instruction.operands:
                continue
            if values is None:
                values = plan.values()
            op_index, args = instruction.operands
            where = f"{source}: method {plan.name()!r} instruction {number}"
            if not isinstance(op_index, int) or not 0 <= op_index < len(names):
                raise FormatError(f"{where}: operator index {op_index} out of range ({len(names)} operators)")
            assert isinstance(args, tuple)
            parts = [part for arg in args if (part := _tensor_part(values, arg, where)) is not None]
            yield names[op_index], (f"{KERNEL_KEY_VERSION}/" + "".join(p + "|" for p in parts))[:-1]


def _tensor_part(values: list[Value], index: int, where: str) -> str | None:
    """The ``dtype;dim order`` of one argument, or None for an argument that is no tensor."""
    value = _at(values, index, where)
    if value.kind == "Tensor" and value.tensor is not None:
        return _describe(value)
    if value.kind == "TensorList" and value.items:
        first = _at(values, int(value.items[0]), where)
        return _describe(first) if first.tensor is not None else None
    if value.kind == "OptionalTensorList":
        for item in value.items or ():
            if item != -1 and (candidate := _at(values, int(item), where)).tensor is not None:
                return _describe(candidate)
    return None


def _at(values: list[Value], index: int, where: str) -> Value:
    if not 0 <= index < len(values):
        raise FormatError(f"{where}: value index {index} out of range ({len(values)} values)")
    return values[index]


def _describe(value: Value) -> str:
    assert value.tensor is not None
    return f"{value.tensor.scalar_type};{','.join(map(str, value.tensor.dim_order))}"


@dataclass(frozen=True)
class DelegateFacts:
    """One delegate of a ``.pte``: its size, and what its reader says it runs and holds."""

    method: str
    index: int
    delegate_id: str
    payload_bytes: int
    weights_bytes: int | None = None
    """Weights inside the payload itself (None: the reader does not say, or there is none)."""
    operators: dict[str, int] = field(default_factory=dict)
    """What it runs, operator -> count (empty: the reader does not say)."""
    known: bool = False
    """True if a backend declares a reader of its id."""


def delegates(path: str | os.PathLike[str]) -> list[DelegateFacts]:
    """Each delegate of the ``.pte`` at ``path``, in method and delegate order, as its payload
    reader (:func:`~ptebuild.runtime.payload_lookup.reader_for`) reads it.

    Raises FormatError for a corrupt ``.pte`` or payload, OSError if it cannot be read."""
    out = []
    with open_pte(Path(path)) as pte:
        for plan in pte.execution_plans():
            method = plan.name()
            for delegate in plan.delegates():
                payload = pte.payload(method, delegate)
                reader = reader_for(payload.delegate_id)
                operators = reader.operators(payload) if reader else None
                out.append(DelegateFacts(
                    method, delegate.index, payload.delegate_id, payload.size,
                    reader.weights_bytes(payload) if reader else None, dict(operators or {}), reader is not None,
                ))
    return out


def delegated_operators(path: str | os.PathLike[str]) -> dict[str, dict[str, int]]:
    """What the delegates of the ``.pte`` at ``path`` run, beside the kernels above: delegate id ->
    operator -> count, summed over its delegates, as each delegate's payload reader says
    (:meth:`~ptebuild.runtime.payloads.PayloadReader.operators`; ids whose reader does not say are
    left out). The operator names are the delegate's own (``XNNFullyConnected``, a MIL ``linear``).

    Raises FormatError for a corrupt ``.pte`` or payload, OSError if it cannot be read.
    """
    found: dict[str, dict[str, int]] = {}
    for delegate in delegates(path):
        if delegate.operators:
            counts = found.setdefault(delegate.delegate_id, {})
            for name, count in delegate.operators.items():
                counts[name] = counts.get(name, 0) + count
    return {key: dict(sorted(counts.items())) for key, counts in sorted(found.items())}


def merge(lists: Iterable[OperatorList]) -> OperatorList:
    """One list for several programs: operators, kernel keys and debug info united, each sorted."""
    operators: set[str] = set()
    kernels: dict[str, set[str]] = {}
    debug: dict[str, set[str]] = {}
    for one in lists:
        operators.update(one.operators)
        for op, keys in one.kernels.items():
            kernels.setdefault(op, set()).update(keys)
        for op, names in one.debug_info.items():
            debug.setdefault(op, set()).update(names)
    return OperatorList(
        tuple(sorted(operators)),
        MappingProxyType({op: tuple(sorted(keys)) for op, keys in sorted(kernels.items())}),
        MappingProxyType({op: tuple(sorted(names)) for op, names in sorted(debug.items())}),
    )


def selected_operators_yaml(oplist: OperatorList, include_all_operators: bool = False) -> bytes:
    """The ``selected_operators.yaml`` of ``oplist``, byte for byte as gen_oplist writes it."""
    import yaml

    text: str = yaml.safe_dump(oplist.to_document(include_all_operators), default_flow_style=False)  # a str without a stream
    return text.encode("utf-8")
