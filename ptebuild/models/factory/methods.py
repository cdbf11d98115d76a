"""A ``factory`` model's methods resolved into the plan's values: each input as an
:class:`~ptebuild.plan.InputPlan`, the dynamic dims its shapes name checked against the model's
``dims`` (a located :class:`~ptebuild.errors.ManifestError` for an unknown one)."""

from __future__ import annotations

from collections.abc import Iterator

from ptebuild.errors import ManifestError
from ptebuild.models.factory.spec import InputSpec, ModelSpec
from ptebuild.plan import DimPlan, InputPlan, MethodPlan
from ptebuild.typos import did_you_mean


def _tensor_inputs(where: str, specs: list[InputSpec]) -> Iterator[tuple[str, InputSpec]]:
    """``(location, spec)`` of every tensor input, also inside tuples, lists and dicts."""
    for index, spec in enumerate(specs):
        at = f"{where}[{index}]"
        if spec.items is not None:
            yield from _tensor_inputs(f"{at}.items", spec.items)
        elif spec.shape is not None:
            yield at, spec


def _input_plan(spec: InputSpec) -> InputPlan:
    if spec.items is not None:
        return InputPlan(name=spec.name, shape=(), dtype="", kind=spec.kind, items=tuple(_input_plan(i) for i in spec.items))
    if spec.value is not None:
        return InputPlan(name=spec.name, shape=(), dtype="", kind="scalar", value=spec.value)
    return InputPlan(name=spec.name, shape=tuple(spec.shape or ()), dtype=spec.dtype, low=spec.low, high=spec.high)


def resolve_methods(display: str, model_name: str, model: ModelSpec) -> dict[str, MethodPlan]:
    """A factory model's methods as plan values (dynamic dims checked against the model's ``dims``)."""
    methods = {}
    for method_name, method in model.methods.items():
        dims = {**model.dims, **method.dims}
        used = set()
        for where, spec in _tensor_inputs(f"models.{model_name}.methods.{method_name}.inputs", method.inputs):
            for dim in spec.shape or ():
                if isinstance(dim, str):
                    if dim not in dims:
                        hint = did_you_mean(dim, dims) or (
                            f"; declare it under models.{model_name}.dims" if not dims
                            else f"; use one of {', '.join(dims)}, or declare it under models.{model_name}.dims"
                        )
                        raise ManifestError(f"{display}: {where}.shape: unknown dynamic dim {dim!r}{hint}")
                    used.add(dim)
        methods[method_name] = MethodPlan(
            name=method_name,
            samples=method.samples,
            function=method.function or method_name,
            inputs=tuple(_input_plan(i) for i in method.inputs),
            dims=tuple(
                DimPlan(name=n, min=d.min, max=d.max, example=d.example_size(), multiple_of=d.multiple_of)
                for n, d in sorted(dims.items())
                if n in used
            ),
        )
    return methods
