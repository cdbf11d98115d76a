"""What a structural check verifies of every program, for backends whose programs cannot run here.

Core ML and Vulkan programs need Apple's Core ML framework or a Vulkan driver and ExecuTorch's
runtime built with that delegate: neither is on this machine (the pip runtime registers no
such backend). Their check is structural: it proves what decides whether the program loads and
binds its arguments, not what it computes (no error figures; the report says ``structural``).
This module holds the part every such check shares, read from the built ``.pte``:

- every method of the program is in the ``.pte``; its tensor inputs have the manifest's dtypes
  and shapes, its tensor outputs eager PyTorch's (both at the dynamic dims' upper bounds, which
  is how a ``.pte`` records a dynamic tensor's sizes);
- the delegate calls of each method (:func:`delegate_calls`): each ``DelegateCall`` with its
  arguments, the delegate's inputs then its outputs, as the runtime passes them.

:func:`check_structure` is the whole check but for one step: it checks that the program parses
(every key every payload names is there, with its bytes), every method's inputs and outputs,
finds each method's calls to the delegate the backend's payload reader reads (a method without
one is refused: the partitioner took none of its operators), and hands each call to the
backend's ``match``, which reads that delegate's payload and matches its inputs and outputs to
the call's arguments (:mod:`ptebuild.backends.coreml.check`, :mod:`ptebuild.backends.vulkan.check`),
raising CheckError at the first mismatch. The figures it returns are what was matched.
Runs in a worker (imports torch for the eager outputs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptebuild.errors import REPORT, CheckError
from ptebuild.plan import MethodPlan, ProgramPlan
from ptebuild.runtime.payloads import DelegatePayload, PayloadReader
from ptebuild.runtime.pte_file import Delegate, ExecutionPlan, PteReader, Value
from ptebuild.runtime.pte_inspection import DTYPES

FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})
INTEGERS = frozenset({"int8", "uint8", "int16", "int32", "int64"})


@dataclass(frozen=True)
class TensorArg:
    """A tensor of the plan: its value index, dtype and sizes (upper bounds when dynamic)."""

    index: int
    dtype: str
    sizes: tuple[int, ...]
    dynamic: bool

    def describe(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.sizes))}]"


@dataclass(frozen=True)
class DelegateCall:
    """One ``DelegateCall`` instruction: which delegate of the method, and its argument values."""

    delegate: int
    args: tuple[int, ...]


@dataclass(frozen=True)
class MethodStructure:
    """What a structural check found in one method (the check's figures: no error figures)."""

    method: str
    delegate: str
    delegates: int
    delegate_calls: int
    kernel_calls: int
    """Instructions left to ExecuTorch's portable kernels."""
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    payload: str = ""
    """What the delegate holds, in one line (``Core ML specification 7, 12 MIL operations``)."""
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "structural": True,
            "delegate": self.delegate,
            "delegates": self.delegates,
            "delegate_calls": self.delegate_calls,
            "kernel_calls": self.kernel_calls,
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "payload": self.payload,
            **self.details,
        }


def compatible(dtype: str, other: str) -> bool:
    """Whether a delegate argument of ``other`` can take a tensor of ``dtype``: equal, or of one
    kind (floating point, integer). Both delegates convert at their boundary within a kind: Core
    ML's runtime copies a ``float32`` tensor into a ``float16`` model input (``ETCoreMLModel``'s
    ``prepareArgs``), Vulkan's staging buffers hold the host dtype (``force_fp16``,
    ``downcast_64_bit``)."""
    return dtype == other or (dtype in FLOATS and other in FLOATS) or (dtype in INTEGERS and other in INTEGERS)


def tensor_arg(values: list[Value], index: int) -> TensorArg | None:
    """The plan's value ``index`` as a :class:`TensorArg`, None when it is not a tensor."""
    if not 0 <= index < len(values):
        return None
    tensor = values[index].tensor
    if tensor is None:
        return None
    return TensorArg(index, DTYPES.get(tensor.scalar_type, f"type {tensor.scalar_type}"), tuple(tensor.sizes), tensor.shape_dynamism != 0)


def delegate_calls(plan: ExecutionPlan) -> tuple[list[DelegateCall], int]:
    """The method's delegate calls, in order, and how many kernel (portable operator) calls it has."""
    calls, kernels = [], 0
    for chain in plan.chains():
        for instruction in chain.instructions:
            if instruction.kind == "DelegateCall" and len(instruction.operands) == 2:
                delegate, args = instruction.operands
                assert isinstance(delegate, int) and isinstance(args, tuple)
                calls.append(DelegateCall(delegate, tuple(int(a) for a in args)))
            elif instruction.kind == "KernelCall":
                kernels += 1
    return calls, kernels


def check_parses(pte: Path, ptd: Path | None, location: str) -> None:
    """The program and its weights file parse, and every constant key of every payload is in the
    ``.pte`` or the ``.ptd`` with the bytes it names; CheckError (at ``location``) if not."""
    from ptebuild.errors import FormatError
    from ptebuild.runtime import check as check_files

    try:
        check_files(pte, [ptd] if ptd else [], verify_bytes=True)
    except FormatError as exc:
        raise CheckError(f"the program does not parse: {exc}; {REPORT}", location=location) from None


@dataclass(frozen=True)
class Delegated:
    """A method's delegate calls (:func:`delegated`): all of them, how many kernel calls it has,
    its delegates, and the calls to the backend under check."""

    calls: list[DelegateCall]
    kernels: int
    delegates: list[Any]
    ours: list[DelegateCall]


def delegated(plan: ExecutionPlan, backend_id: str, backend: str, method: str, location: str) -> Delegated:
    """The calls of ``method`` to the delegate ``backend_id`` (``backend`` its name in messages);
    CheckError if there is none: the partitioner took none of its operators."""
    calls, kernels = delegate_calls(plan)
    delegates = plan.delegates()
    ours = [call for call in calls if 0 <= call.delegate < len(delegates) and delegates[call.delegate].backend() == backend_id]
    if not ours:
        raise CheckError(
            f"method {method!r} has no {backend} delegate: the partitioner took none of its operators "
            f"({kernels} run on ExecuTorch's portable kernels): build it for the portable backend, or change the "
            "model to operators this backend takes",
            location=location,
        )
    return Delegated(calls, kernels, delegates, ours)


def upper_bounds(method: MethodPlan) -> dict[str, int]:
    return {dim.name: dim.max for dim in method.dims}


def check_method_io(model: Any, program: ProgramPlan, method: MethodPlan, plan: ExecutionPlan) -> None:
    """The method's tensor inputs and outputs in the ``.pte`` against the manifest's inputs and
    eager PyTorch's outputs, at the dynamic dims' upper bounds; CheckError names the first that differs."""
    import torch
    from torch.utils._pytree import tree_leaves

    from ptebuild.lowering.binding import call_method
    from ptebuild.lowering.examples import flat_inputs, make_inputs

    where = f"method {method.name!r}"
    values = plan.values()
    sizes = upper_bounds(method)
    inputs = make_inputs(method, program.seed, sizes)

    def expected(kind: str) -> list[Any]:
        if kind == "input":
            return [t for t in flat_inputs(inputs) if isinstance(t, torch.Tensor)]
        with torch.no_grad():  # only once the inputs match: the model runs on them
            return [t for t in tree_leaves(call_method(model, method, inputs, program.model)) if isinstance(t, torch.Tensor)]

    for kind, indexes in (("input", plan.inputs()), ("output", plan.outputs())):
        tensors = expected(kind)
        found = [arg for arg in (tensor_arg(values, i) for i in indexes) if arg is not None]
        if len(found) != len(tensors):
            raise CheckError(
                f"{where} takes {len(found)} tensor {kind}s in the .pte, "
                f"{'the manifest declares' if kind == 'input' else 'eager PyTorch returns'} {len(tensors)}; "
                + (REPORT if kind == "input" else "make the method return the same outputs at every size"),
                location=f"programs.{program.name}",
            )
        for i, (arg, tensor) in enumerate(zip(found, tensors)):
            want = str(tensor.dtype).removeprefix("torch.")
            if arg.dtype != want or arg.sizes != tuple(tensor.shape):
                raise CheckError(
                    f"{where} {kind} {i} is {arg.describe()} in the .pte, expected {want}{list(tensor.shape)} "
                    f"(at {sizes or 'the example sizes'}); {REPORT}",
                    location=f"programs.{program.name}",
                )


def method_plans(pte_reader: PteReader, program: ProgramPlan) -> dict[str, ExecutionPlan]:
    """The ``.pte``'s plan of each of the program's methods; CheckError for one that is missing."""
    plans = {plan.name(): plan for plan in pte_reader.execution_plans()}
    for method in program.methods:
        if method.name not in plans:
            raise CheckError(
                f"the .pte has no method {method.name!r} (it has {', '.join(sorted(plans)) or 'none'}); {REPORT}",
                location=f"programs.{program.name}",
            )
    return plans


@dataclass(frozen=True)
class Call:
    """One call to the delegate under check, as :func:`check_structure` hands it to ``match``."""

    reader: PteReader
    program: ProgramPlan
    method: MethodPlan
    plan: ExecutionPlan
    values: list[Value]
    call: DelegateCall
    delegate: Delegate
    where: str
    """``method 'encode' delegate 0``: what messages start with."""

    def payload(self) -> DelegatePayload:
        """The delegate's payload, as its reader takes it."""
        return self.reader.payload(self.method.name, self.delegate)


@dataclass(frozen=True)
class Matched:
    """What ``match`` found one call's delegate to be: its inputs and outputs described, and a
    line about its payload (``Core ML specification 7 (iOS16+), 12 MIL operations``)."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    payload: str = ""
    operators: int = 0
    """Operator calls in its payload (for a summary that adds them up)."""


def joined_payloads(matched: Sequence[Matched]) -> str:
    """The calls' payload lines, each once, joined with ``; ``."""
    return "; ".join(dict.fromkeys(m.payload for m in matched if m.payload))


def check_structure(
    model: Any,
    program: ProgramPlan,
    pte: Path,
    ptd: Path | None,
    payloads: PayloadReader,
    match: Callable[[Call], Matched],
    summarize: Callable[[Sequence[Matched]], str] = joined_payloads,
) -> list[MethodStructure]:
    """The structural check of ``program`` (module docstring) for the delegate ``payloads`` reads;
    ``match`` checks one call (CheckError at the first mismatch), ``summarize`` puts a method's
    payload lines in one. Returns one :class:`MethodStructure` per method."""
    from ptebuild.runtime.pte_file import open_pte

    location = f"programs.{program.name}"
    check_parses(pte, ptd, location)
    figures = []
    with open_pte(pte) as reader:
        plans = method_plans(reader, program)
        for method in program.methods:
            plan = plans[method.name]
            check_method_io(model, program, method, plan)
            found = delegated(plan, payloads.delegate_id, payloads.name, method.name, location)
            values = plan.values()
            matched = []
            for call in found.ours:
                where = f"method {method.name!r} delegate {call.delegate}"
                try:
                    matched.append(match(Call(reader, program, method, plan, values, call,
                                              found.delegates[call.delegate], where)))
                except CheckError as exc:
                    if exc.location is not None:
                        raise
                    raise CheckError(exc.message, location=location) from None
            several = len(found.ours) > 1
            inputs = [f"delegate {c.delegate} " * several + d for c, m in zip(found.ours, matched) for d in m.inputs]
            outputs = [f"delegate {c.delegate} " * several + d for c, m in zip(found.ours, matched) for d in m.outputs]
            figures.append(MethodStructure(
                method=method.name,
                delegate=payloads.delegate_id,
                delegates=len({call.delegate for call in found.ours}),
                delegate_calls=len(found.calls),
                kernel_calls=found.kernels,
                inputs=tuple(inputs),
                outputs=tuple(outputs),
                payload=summarize(matched),
            ))
    return figures
