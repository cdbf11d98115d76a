"""The build check of a Linux CUDA program (``"aoti-runner-cuda"``), on the GPU.

Every output slot of every method, as the ``.pte``'s method declares them (read with ptebuild's
own reader), is compared with eager PyTorch, leaf by leaf; two slots that return one tensor are
refused (ExecuTorch 1.5's CUDA runtime deletes such a handle twice); the compiled code's C shims
are checked against what ExecuTorch's CUDA runtime defines first (:mod:`.runtime_shims`).

:meth:`ptebuild.backends.cuda.CudaBackend.check`: ExecuTorch's pip runtime
has no CUDA backend, so each method's own compiled ``.so``, taken from the ``.pte``, runs through
PyTorch's ``AOTIModelContainerRunnerCuda`` with the weights read from the ``.ptd`` by the keys in
the ``.pte``'s payload, and is compared with eager PyTorch on the GPU (:func:`check_with_aoti_runner`).
A Windows program's DLL cannot run here: its check is ``"windows-imports"``
(:func:`ptebuild.backends.cuda.windows.check_windows_program`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path

# ExecuTorch ScalarType -> torch dtype name (exir/scalar_type.py).
_SCALAR_TYPES = {
    0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
    7: "float64", 11: "bool", 15: "bfloat16",
}
_TORCH_LIBS = ("libc10.so", "libc10_cuda.so", "libtorch_cpu.so", "libtorch_cuda.so")


@functools.lru_cache(maxsize=1)
def _load_torch_shims() -> None:
    """Make libtorch's ``aoti_torch_*`` C shims global, for the ``.so`` built without libtorch."""
    import ctypes

    import torch

    lib_dir = Path(torch.__file__).parent / "lib"
    for name in _TORCH_LIBS:
        ctypes.CDLL(str(lib_dir / name), mode=ctypes.RTLD_GLOBAL)


def _weight_tensor(weight, blob: bytes):
    import torch

    dtype_name = _SCALAR_TYPES.get(weight.dtype)
    if dtype_name is None:
        raise ValueError(f"weight {weight.fqn!r}: unsupported ExecuTorch dtype {weight.dtype}")
    dtype = getattr(torch, dtype_name)
    storage = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
    flat = storage.view(dtype) if len(blob) else torch.empty(0, dtype=dtype)
    tensor = torch.as_strided(flat, weight.sizes, weight.strides, weight.storage_offset)
    device = "cuda" if weight.device_type == 1 else "cpu"
    return tensor.to(device)


def _runner(pte: Path, payload, data, so_path: Path, program_name: str):
    """One method's compiled code (``payload``'s ``.so``, written to ``so_path``) in PyTorch's
    ``AOTIModelContainerRunnerCuda``, its weights read from the ``.ptd`` (``data``) by the keys in
    its payload: the method as ExecuTorch's CUDA runtime would run it. Its constants persist from
    one ``run`` to the next (a KV cache's buffers)."""
    import torch

    from ptebuild.backends.cuda.delegates import read_pte_named_data
    from ptebuild.errors import REPORT, BuildError

    so_path.write_bytes(read_pte_named_data(pte, payload.so_blob_key))
    runner = torch._C._aoti.AOTIModelContainerRunnerCuda(str(so_path), 1, "cuda", "")
    by_fqn = {w.fqn: w for w in payload.weights}
    constants = {}
    for name, fqn in runner.get_constant_names_to_original_fqns().items():
        weight = by_fqn.get(name) or by_fqn.get(fqn)
        if weight is None:
            continue  # folded into the .so by AOTInductor
        if data is None:
            raise BuildError(f"the CUDA delegate names weights but the program has no .ptd; {REPORT}", location=f"programs.{program_name}")
        constants[name] = _weight_tensor(weight, data.read_blob(weight.storage_key))
    if constants:
        runner.update_constant_buffer(constants, False, False)
    return runner


@contextlib.contextmanager
def aoti_method(pte: Path, ptd: Path | None, method: str, program_name: str) -> Iterator:
    """``run(inputs)`` of ``method``'s compiled code from ``pte`` on the GPU (PyTorch's AOTInductor
    runner, weights from ``ptd``: :func:`_runner`), after the checks of :func:`check_with_aoti_runner`
    (keys, bytes, C shims). Raises BuildError where it cannot run so."""
    import tempfile

    import torch

    from ptebuild.backends.cuda.delegates import read_cuda_delegates
    from ptebuild.backends.cuda.runtime_shims import check_program_shims
    from ptebuild.errors import REPORT, BuildError
    from ptebuild.runtime import check as check_files
    from ptebuild.runtime.ptd_file import read_ptd

    check_files(pte, [ptd] if ptd else [], verify_bytes=True)
    check_program_shims(pte, program_name)
    if not torch.cuda.is_available():
        raise BuildError("the CUDA check needs a GPU; torch sees none: build CUDA programs on a machine with one",
                         location=f"programs.{program_name}")
    _load_torch_shims()
    found = [d for d in read_cuda_delegates(pte) if d.method == method]
    if len(found) != 1:
        raise BuildError(f"method {method!r} has {len(found)} CUDA delegates; the AOTInductor runner needs one; {REPORT}",
                         location=f"programs.{program_name}")
    with tempfile.TemporaryDirectory(prefix="ptebuild-cuda-run-") as tmp:
        runner = _runner(pte, found[0].payload, read_ptd(ptd) if ptd else None, Path(tmp, f"{method}.so"), program_name)
        yield lambda inputs: list(runner.run(list(inputs)))


def check_with_aoti_runner(model, program, pte: Path, ptd: Path | None, samples=None) -> list:
    """Run each method's compiled ``.so`` (from ``pte``) with weights from ``ptd``; compare on the GPU,
    at each check size and on the method's ``samples`` (method name -> input tuples).

    Raises CheckError on a mismatch, BuildError when the program cannot be run this way.
    """
    import copy
    import tempfile

    import torch
    from torch.utils._pytree import tree_map

    from ptebuild.backends.cuda.delegates import read_cuda_delegates
    from ptebuild.backends.cuda.runtime_shims import check_program_shims
    from ptebuild.errors import REPORT, BuildError
    from ptebuild.lowering.binding import call_method
    from ptebuild.lowering.check import checked_figures, concat_outputs, flatten_outputs, output_names
    from ptebuild.lowering.examples import check_inputs, check_sizes, flat_inputs
    from ptebuild.runtime import check as check_files
    from ptebuild.runtime.ptd_file import read_ptd

    # Pure-Python first: every key of every payload is in the .ptd and its bytes hash to it, and
    # ExecuTorch's CUDA runtime defines every C shim the compiled code calls.
    check_files(pte, [ptd] if ptd else [], verify_bytes=True)
    check_program_shims(pte, program.name)
    slots = declared_outputs(pte)
    calls = delegate_calls(pte)
    if not torch.cuda.is_available():
        raise BuildError("the CUDA check needs a GPU and torch sees none; build CUDA programs on a machine with one",
                         location=f"programs.{program.name}")
    _load_torch_shims()
    delegates = {}
    for found in read_cuda_delegates(pte):
        if found.method in delegates:
            raise BuildError(
                f"method {found.method!r} has several CUDA delegates, and the AOTInductor runner check needs "
                f"one per method; {REPORT}",
                location=f"programs.{program.name}",
            )
        delegates[found.method] = found
    data = read_ptd(ptd) if ptd else None
    eager = copy.deepcopy(model).to("cuda").eval()
    figures = []
    with tempfile.TemporaryDirectory(prefix="ptebuild-cuda-check-") as tmp:
        for method in program.methods:
            delegate = delegates.get(method.name)
            if delegate is None:
                raise BuildError(f"method {method.name!r} has no CUDA delegate; {REPORT}", location=f"programs.{program.name}")
            runner = _runner(pte, delegate.payload, data, Path(tmp, f"{method.name}.so"), program.name)
            own = (samples or {}).get(method.name, [])
            runs = [(sizes, check_inputs(program, method, sizes, own)) for sizes in check_sizes(method)]
            sample_runs = [(None, sample) for sample in own]
            on_samples: list = []
            for sizes, generated in runs + sample_runs:
                inputs = tree_map(lambda t: t.to("cuda") if isinstance(t, torch.Tensor) else t, generated)
                # The runner takes the tensors of the flattened inputs (scalars are constants of the code).
                runner_inputs = [t for t in flat_inputs(inputs) if isinstance(t, torch.Tensor)]
                with torch.no_grad():
                    result = call_method(eager, method, inputs, program.model)
                    returned = list(runner.run(runner_inputs))
                where = f"method {method.name!r} at {sizes}" if sizes is not None else f"method {method.name!r} on a sample"
                declared = slots.get(method.name)
                expected, names = flatten_outputs(result), output_names(result)
                shared = shared_slots(returned)
                if shared:
                    raise BuildError(
                        f"{where} returns one tensor in output slots {' and '.join(map(str, shared))}: ExecuTorch 1.5's "
                        "CUDA runtime would delete it once per slot and crash; return a .clone() in all but one",
                        location=f"programs.{program.name}",
                    )
                if method.name in calls:
                    # The compiled code returns its outputs in the delegated graph's order; the
                    # method's slots name them by value, as ExecuTorch's runtime maps them.
                    returned = slot_outputs(returned, *calls[method.name], where, program.name)
                elif declared is not None and len(returned) != declared:
                    raise BuildError(
                        f"{where}: the compiled code returned {len(returned)} outputs, the program declares "
                        f"{declared} output slots; {REPORT}", location=f"programs.{program.name}",
                    )
                if declared is not None and len(expected) != declared:
                    raise BuildError(
                        f"{where}: eager PyTorch returns {len(expected)} outputs, the program declares "
                        f"{declared} output slots; {REPORT}", location=f"programs.{program.name}",
                    )
                if sizes is None:
                    on_samples.append((expected, flatten_outputs(returned), names))
                    continue
                figures += checked_figures(
                    program, method.name, sizes, expected, flatten_outputs(returned),
                    " (AOTInductor runner on the GPU)", names=names,
                )
            if on_samples:
                outputs = range(len(on_samples[0][0]))
                figures += checked_figures(
                    program, method.name, {}, [concat_outputs([run[0][i] for run in on_samples]) for i in outputs],
                    [concat_outputs([run[1][i] for run in on_samples]) for i in outputs],
                    " (AOTInductor runner on the GPU)", names=on_samples[0][2], data="samples", samples=len(on_samples),
                )
            del runner
    return figures


def declared_outputs(pte: Path) -> dict[str, int]:
    """Each method's number of output slots, as the ``.pte``'s execution plan lists them."""
    from ptebuild.runtime.pte_file import open_pte

    with open_pte(pte) as reader:
        return {plan.name(): len(plan.outputs()) for plan in reader.execution_plans()}


# Kernels ExecuTorch emits around a device delegate to move a tensor between host and device
# (out variants: ``(self, out, out)``); a method's output is traced back through them.
_COPY_KERNELS = frozenset({"et_copy::_h2d_copy", "et_copy::_d2h_copy"})


def delegate_calls(pte: Path) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Per method with one delegate call: ``(the call's argument value indexes, the value each
    output slot comes from)``. A delegate call's arguments are its inputs, then its outputs, in the
    order the compiled code takes and returns them (ExecuTorch's emitter); the method's output
    slots name values, which need not come out of the delegate in slot order, and are often the
    host copies (``et_copy::_d2h_copy``) of the delegate's device outputs."""
    from ptebuild.runtime.pte_file import open_pte

    found = {}
    with open_pte(pte) as reader:
        for plan in reader.execution_plans():
            operators = plan.operators()
            instructions = [i for chain in plan.chains() for i in chain.instructions]
            calls = [i for i in instructions if i.kind == "DelegateCall"]
            if len(calls) != 1:
                continue
            copied_from: dict[int, int] = {}
            for instruction in instructions:
                if instruction.kind != "KernelCall":
                    continue
                index, args = instruction.operands
                if isinstance(index, int) and isinstance(args, tuple) and len(args) >= 2 and index < len(operators):
                    if operators[index].name in _COPY_KERNELS:
                        copied_from[args[-1]] = args[0]
            sources = []
            for value in plan.outputs():
                seen = set()
                while value in copied_from and value not in seen:
                    seen.add(value)
                    value = copied_from[value]
                sources.append(value)
            args = calls[0].operands[1]
            found[plan.name()] = (tuple(args) if isinstance(args, tuple) else (), tuple(sources))
    return found


def slot_outputs(returned: list, call_args: tuple[int, ...], slots: tuple[int, ...], where: str, program: str) -> list:
    """The compiled code's outputs (``returned``, in the delegate's order) in the method's slot
    order: slot ``s`` holds value ``slots[s]``, the delegate wrote its outputs to the last
    ``len(returned)`` values of ``call_args``."""
    from ptebuild.errors import REPORT, BuildError

    produced = call_args[len(call_args) - len(returned):] if returned else ()
    if len(produced) != len(returned):
        raise BuildError(
            f"{where}: the compiled code returned {len(returned)} outputs, the delegate call names {len(call_args)} values; {REPORT}",
            location=f"programs.{program}",
        )
    ordered = []
    for slot, value in enumerate(slots):
        if value not in produced:
            raise BuildError(
                f"{where}: output slot {slot} is not computed by the CUDA delegate (value {value}); the AOTInductor "
                "runner check covers programs whose outputs all come out of the delegate: return only tensors the model computes",
                location=f"programs.{program}",
            )
        ordered.append(returned[produced.index(value)])
    return ordered


def shared_slots(outputs: list) -> list[int]:
    """The output slots (first group found) whose tensors share one data pointer, or []."""
    seen: dict[tuple, int] = {}
    for index, tensor in enumerate(outputs):
        if not hasattr(tensor, "data_ptr") or tensor.numel() == 0:
            continue
        key = (tensor.data_ptr(), tuple(tensor.shape), tensor.dtype)
        if key in seen:
            return [seen[key], index]
        seen[key] = index
    return []
