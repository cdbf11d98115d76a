"""How a method's declared inputs reach the model's function: bound by name.

Each declared input binds to the function's parameter of that name, so a Hugging Face style
``forward(input_ids, inputs_embeds=None, cache_position=None)`` declared with the inputs
``input_ids`` and ``cache_position`` gets ``cache_position`` where it belongs, and parameters
that no input names keep their defaults. A scalar input (``{ name = "temperature", value = 0.5 }``)
is a keyword like any other. The rules, in order:

- a function that takes ``*args`` gets its inputs by position, in the declared order (as it always
  did), except those named after one of its keyword-only parameters, which go by keyword;
- a function without ``*args``: an input named after a positional-only parameter goes by position
  (those before it must be declared too), any other by keyword; a name that is no parameter is
  refused unless the function takes ``**kwargs``;
- a function whose signature Python cannot read (a builtin) gets its inputs by position;
- a function of PyTorch's own modules (``nn.Sequential.forward(input)``, ``nn.Linear.forward(input)``)
  gets its inputs by position too: its parameter names are generic, and a manifest names the
  inputs of such a model by what they mean (``image``), not as torch's code does.

A name that is not a parameter, a name given twice, or a required parameter no input names is a
:class:`~ptebuild.errors.ManifestError` located at the manifest's key that is wrong
(``models.M.methods.F.inputs[1].name``, or ``models.M.methods.F.inputs``), listing the function's
parameters. Where the inputs would fit the function by position, as releases before binding by
name passed them, the error is :class:`BoundByPosition`: a manifest written for such a release, with
the renames that carry it over (every input of the method, ``(key, old name, new name)``), so that
a build can say once for all its programs what to change.

The exported program takes the declared inputs positionally, in the declared order (the method
wrapper of :mod:`ptebuild.models.factory.lower` binds them to the function), so ExecuTorch's runtime, a
``.bpte``'s test cases and calibration get the flat inputs in that order; only an eager call goes
through :meth:`Binding.call`. Every eager call of a method (the export, the check, the ``.bpte``'s
expected outputs, ``ptebuild run``, calibration) binds through :func:`bind` or :func:`call_method`.
Imports neither torch nor executorch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ptebuild.errors import ManifestError
from ptebuild.plan import MethodPlan
from ptebuild.typos import did_you_mean


class BoundByPosition(ManifestError):
    """Inputs that name no parameter but fit the function by position: a manifest of a release
    that passed inputs by position. ``renames``: ``(key, old name, new name)`` of each input to rename."""

    def __init__(self, message: str, renames: tuple[tuple[str, str, str], ...], **where: Any) -> None:
        super().__init__(message, **where)
        self.renames = renames


@dataclass(frozen=True)
class Binding:
    """Which declared input goes where in a call: by position (their indexes, in call order) or
    by keyword (parameter name -> input index)."""

    positional: tuple[int, ...]
    keywords: tuple[tuple[str, int], ...] = ()

    def arguments(self, inputs: Sequence[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(args, kwargs)`` of a call with the declared ``inputs`` (in declared order)."""
        return tuple(inputs[i] for i in self.positional), {name: inputs[i] for name, i in self.keywords}

    def call(self, function: Callable[..., Any], inputs: Sequence[Any]) -> Any:
        args, kwargs = self.arguments(inputs)
        return function(*args, **kwargs)


def _where(model: str, method: MethodPlan) -> str:
    return f"models.{model}.methods.{method.name}.inputs"


def describe_signature(function: Callable[..., Any], signature: inspect.Signature) -> str:
    """``Decoder.forward(input_ids, inputs_embeds=None, cache_position=None)``, for messages."""
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", None) or "the function"
    parts = []
    for parameter in signature.parameters.values():
        text = parameter.name
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            text = f"*{text}"
        elif parameter.kind is inspect.Parameter.VAR_KEYWORD:
            text = f"**{text}"
        elif parameter.default is not inspect.Parameter.empty:
            default = repr(parameter.default)
            text += "=" + (default if len(default) <= 20 else "...")
        parts.append(text)
    return f"{name}({', '.join(parts)})"


def bind(function: Callable[..., Any], method: MethodPlan, model: str) -> Binding:
    """How ``method``'s declared inputs bind to ``function``'s parameters (the rules above).

    Raises:
        ManifestError: an input names no parameter, two inputs name one, or a required parameter
            is named by no input; located at the input (``...inputs[i].name``) or the list.
    """
    names = [spec.name for spec in method.inputs]
    positional_all = Binding(tuple(range(len(names))))
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin or an extension's function: nothing to bind by
        return positional_all
    if _torch_own(function):
        return _torch_own_binding(function, signature, names, _where(model, method))
    parameters = signature.parameters
    kinds = {name: p.kind for name, p in parameters.items()}
    shown = describe_signature(function, signature)
    where = _where(model, method)
    twice = next((i for i, name in enumerate(names) if name in names[:i]), None)
    if twice is not None:
        raise ManifestError(f"{names[twice]!r} is declared twice; {shown} takes each parameter once: remove one of them",
                            location=f"{where}[{twice}].name")
    if inspect.Parameter.VAR_POSITIONAL in kinds.values():
        keyword_only = {n for n, k in kinds.items() if k is inspect.Parameter.KEYWORD_ONLY}
        binding = Binding(
            tuple(i for i, name in enumerate(names) if name not in keyword_only),
            tuple((name, i) for i, name in enumerate(names) if name in keyword_only),
        )
    else:
        takes_kwargs = inspect.Parameter.VAR_KEYWORD in kinds.values()
        for index, name in enumerate(names):
            if name not in parameters and not takes_kwargs:
                named = list(parameters)
                renames = _renames_by_position(signature, names, where)
                if renames:
                    said = ", ".join(f"{old!r} -> {new!r}" for _, old, new in renames)
                    raise BoundByPosition(
                        f"{name!r} is not a parameter of {shown}: inputs are bound to the parameters by name (releases "
                        f"before passed them by position); rename the method's inputs after its parameters: {said}",
                        renames, location=f"{where}[{index}].name",
                    )
                raise ManifestError(
                    f"{name!r} is not a parameter of {shown}{did_you_mean(name, named)}; "
                    f"name each input after the parameter it is passed as ({', '.join(named) or 'it takes none'})",
                    location=f"{where}[{index}].name",
                )
        by_position = [n for n, k in kinds.items() if k is inspect.Parameter.POSITIONAL_ONLY]
        given = [n for n in by_position if n in names]
        if given != by_position[: len(given)]:
            missing = next(n for n in by_position if n not in names)
            raise ManifestError(f"{shown} takes {missing!r} by position only, before {given[-1]!r}; declare it too", location=where)
        binding = Binding(
            tuple(names.index(n) for n in given),
            tuple((name, i) for i, name in enumerate(names) if name not in given),
        )
    _check_fits(function, signature, binding, names, where)
    return binding


def _renames_by_position(signature: inspect.Signature, names: list[str], where: str) -> tuple[tuple[str, str, str], ...]:
    """The renames that bind ``names`` as a release that passed inputs by position bound them, if
    they fit the signature that way and none of them is a parameter or a near miss of one (a typo
    is said as a typo); else none."""
    by_position = [n for n, p in signature.parameters.items()
                   if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    if len(names) > len(by_position) or any(name in signature.parameters or did_you_mean(name, list(signature.parameters))
                                            for name in names):
        return ()
    try:
        signature.bind(*range(len(names)))
    except TypeError:
        return ()
    return tuple((f"{where}[{i}].name", name, by_position[i]) for i, name in enumerate(names) if name != by_position[i])


def _torch_own_binding(function: Callable[..., Any], signature: inspect.Signature, names: list[str], where: str) -> Binding:
    """By position; an input beyond the parameters of torch's function is located as any other
    name that is no parameter (``Linear.forward(input)`` declared with two inputs)."""
    kinds = [p.kind for p in signature.parameters.values()]
    by_position = [n for n, p in signature.parameters.items()
                   if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    if inspect.Parameter.VAR_POSITIONAL not in kinds and len(names) > len(by_position):
        extra = len(by_position)
        raise ManifestError(
            f"{names[extra]!r} is not a parameter of {describe_signature(function, signature)}; "
            f"name each input after the parameter it is passed as ({', '.join(by_position) or 'it takes none'})",
            location=f"{where}[{extra}].name",
        )
    binding = Binding(tuple(range(len(names))))
    _check_fits(function, signature, binding, names, where)
    return binding


def _check_fits(function: Callable[..., Any], signature: inspect.Signature, binding: Binding, names: list[str], where: str) -> None:
    """Raise the located error when the call ``binding`` makes does not fit ``signature``."""
    try:
        signature.bind(*binding.positional, **dict(binding.keywords))
    except TypeError as exc:
        raise ManifestError(
            f"the inputs ({', '.join(names)}) do not fit {describe_signature(function, signature)}: {exc}; "
            "declare one input per parameter it needs, named after it",
            location=where,
        ) from None


def _torch_own(function: Callable[..., Any]) -> bool:
    """Whether ``function`` is PyTorch's own code (a method of one of ``torch.nn``'s modules)."""
    module = getattr(getattr(function, "__func__", function), "__module__", None) or ""
    return module == "torch" or module.startswith("torch.")


def call_method(model: Any, method: MethodPlan, inputs: Sequence[Any], model_name: str) -> Any:
    """Call ``method`` of ``model`` on its declared ``inputs`` (in declared order), bound by name;
    ``model_name`` (the manifest's) locates a binding error."""
    function = getattr(model, method.function)
    return bind(function, method, model_name).call(function, inputs)
