"""Lower one program: torch.export -> to_edge_transform_and_lower -> to_executorch -> files.

Runs in a worker process: imports torch and executorch. The program's files are written into a
staging folder; publishing them into the output folder is the parent's job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ptebuild.backends import get_backend
from ptebuild.errors import BuildError
from ptebuild.plan import MethodPlan, ProgramPlan

Progress = Callable[[str], None]


@dataclass
class LoweredProgram:
    """The files of a lowered program, in a staging folder."""

    files: dict[str, Path]
    """Output file name (``policy.pte``, ``weights.ptd``) -> staged path."""
    methods: list[str]
    delegated: dict[str, int] = field(default_factory=dict)
    """Method -> number of delegate calls (0 for portable)."""


class MethodModule:
    """Factory of a module whose ``forward`` calls one method of the model."""

    @staticmethod
    def wrap(model, function: str):
        import torch

        class _Method(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, *args):
                return getattr(self.model, function)(*args)

        return _Method()


def dynamic_shapes(method: MethodPlan):
    """torch.export dynamic shapes for ``method``'s inputs, or None when every dim is static."""
    import torch

    if not method.dims:
        return None
    dims = {d.name: torch.export.Dim(d.name, min=d.min, max=d.max) for d in method.dims}
    shapes = []
    for spec in method.inputs:
        shapes.append({axis: dims[d] for axis, d in enumerate(spec.shape) if isinstance(d, str)} or None)
    return tuple(shapes)


def export_method(model, program: ProgramPlan, method: MethodPlan, example_inputs, progress: Progress):
    import torch

    if not callable(getattr(model, method.function, None)):
        raise BuildError(
            f"model {program.model!r} has no callable {method.function!r} "
            f"for method {method.name!r}",
            location=f"programs.{program.name}",
        )
    shapes = dynamic_shapes(method)

    def export(module):
        """Export again a module that takes the inputs positionally (an unlifted graph)."""
        return torch.export.export(module, example_inputs, dynamic_shapes=shapes, strict=False)

    progress(f"exporting {method.name}")
    try:
        # The method module's forward takes *args: its dynamic shapes are one entry, for ``args``.
        exported = torch.export.export(
            MethodModule.wrap(model, method.function),
            example_inputs,
            dynamic_shapes=None if shapes is None else (shapes,),
            strict=False,
        )
    except Exception as exc:
        raise BuildError(
            f"torch.export of method {method.name!r} failed: "
            f"{type(exc).__name__}: {_first_line(exc)}",
            location=f"programs.{program.name}",
        ) from exc
    backend = get_backend(program.backend)
    options = backend.options_model.model_validate(program.options)
    if getattr(options, "quantize", "none") != "none":
        progress(f"quantizing {method.name} ({options.quantize})")
    try:
        return backend.prepare(exported, program.data_name, options, export, calibration_inputs(program, method))
    except Exception as exc:
        raise BuildError(
            f"preparing method {method.name!r} for {program.backend} failed: "
            f"{type(exc).__name__}: {_first_line(exc)}",
            location=f"programs.{program.name}",
        ) from exc


CALIBRATION_DRAWS = 4


def calibration_inputs(program: ProgramPlan, method: MethodPlan) -> list[tuple]:
    """Inputs to calibrate quantization with: each check size, several seeded draws each."""
    from ptebuild.lowering.examples import check_sizes, make_inputs

    return [
        make_inputs(method, program.seed + 1 + draw, sizes)
        for sizes in check_sizes(method)
        for draw in range(CALIBRATION_DRAWS)
    ]


def lower(model, program: ProgramPlan, inputs_by_method: dict, staging: Path, progress: Progress) -> LoweredProgram:
    """Lower ``program`` and write its ``.pte`` (and ``.ptd``) into ``staging``."""
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    backend = get_backend(program.backend)
    options = backend.options_model.model_validate(program.options)
    exported = {
        method.name: export_method(model, program, method, inputs_by_method[method.name], progress)
        for method in program.methods
    }
    progress(f"lowering for {program.backend}")
    data_name = program.data_name
    try:
        with backend.lowering_context(options):
            edge = to_edge_transform_and_lower(
                exported,
                partitioner=backend.partitioners(options, program),
                compile_config=EdgeCompileConfig(_check_ir_validity=False),
            )
            config = backend.emit_config(data_name, options)
            progress("emitting the program")
            executorch_program = edge.to_executorch(config)
        backend.rewrite_keys(executorch_program, config)
    except BuildError:
        raise
    except Exception as exc:
        raise BuildError(
            f"lowering for {program.backend} failed: "
            f"{type(exc).__name__}: {_first_line(exc)}",
            location=f"programs.{program.name}",
        ) from exc
    staging.mkdir(parents=True, exist_ok=True)
    files = {}
    pte_path = staging / program.pte_name
    with open(pte_path, "wb") as out:
        executorch_program.write_to_file(out)
    files[program.pte_name] = pte_path
    for stem, cord in backend.data_files(executorch_program, data_name, program.name).items():
        ptd_path = staging / f"{stem}.ptd"
        with open(ptd_path, "wb") as out:
            cord.write_to_file(out)
        files[ptd_path.name] = ptd_path
    delegated = {
        name: sum(1 for _ in plan.delegates) for name, plan in _plans(executorch_program)
    }
    return LoweredProgram(files=files, methods=[m.name for m in program.methods], delegated=delegated)


def _plans(executorch_program):
    return [(plan.name, plan) for plan in executorch_program.executorch_program.execution_plan]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
