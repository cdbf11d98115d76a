"""The ``factory`` model kind's manifest table: a callable that makes the model, its weights, its
methods and their inputs (validated by pydantic; ``ptebuild schema`` shows it under ``ModelSpec``).

The manifest's own tables (:mod:`ptebuild.manifest.schema`) build on :class:`Strict`; the kind
resolves a table into the plan's methods (:mod:`.methods`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Self, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictFloat,
    StrictInt,
    field_validator,
    model_serializer,
    model_validator,
)

DType = Literal["float32", "float16", "bfloat16", "int32", "int64", "int8", "uint8", "bool"]
DTYPES = get_args(DType)

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
WEIGHTS_KEY = re.compile(r"^[^.\s]+(\.[^.\s]+)*$")
FACTORY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_.]*")


STRICT = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
"""Every manifest table's pydantic configuration: frozen, unknown keys refused, fields documented."""


class Strict(BaseModel):
    model_config = STRICT


class DynamicDim(Strict):
    """A dimension whose size may vary at run time between ``min`` and ``max``."""

    min: Annotated[int, Field(ge=1)] = 1
    max: Annotated[int, Field(ge=1)]
    example: Annotated[int, Field(ge=2)] | None = None
    """The size used for the example inputs; default: 2 (clamped to [min, max]; with
    ``multiple_of``: min)."""
    multiple_of: Annotated[int, Field(ge=1)] = 1
    """Every size is a multiple of this (a model that halves the size, or cuts it into blocks);
    min, max and example must be multiples of it, and min at least twice it (torch.export fixes
    a number of steps of 1)."""

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max}); give min <= max")
        if self.example is not None and not self.min <= self.example <= self.max:
            raise ValueError(f"example ({self.example}) is outside [min, max] = [{self.min}, {self.max}]; give one inside")
        step = self.multiple_of
        for key in ("min", "max", "example"):
            value = getattr(self, key)
            if value is not None and value % step:
                below, above = value // step * step, (value // step + 1) * step
                fits = f"{below} or {above}" if below else str(above)
                raise ValueError(f"{key} ({value}) is not a multiple of multiple_of ({step}); give {fits}")
        if step > 1 and self.min < self.max and self.min < 2 * step:
            raise ValueError(
                f"min ({self.min}) is one block of multiple_of ({step}): torch.export takes a dim in steps from two "
                f"steps on (it fixes a number of steps of 1); give min >= {2 * step}"
                + ("" if self.max >= 2 * step else f" and max >= {2 * step}, or min = max for one size")
            )
        return self

    def example_size(self) -> int:
        if self.example is not None:
            return self.example
        # torch.export specialises a dimension traced with size 0 or 1, so trace with 2 or more
        # (2 or more blocks of multiple_of).
        return min(max(2 * self.multiple_of, self.min), self.max)


class InputSpec(Strict):
    """One input of a method: a tensor (its ``shape``: ints, or names of dynamic dims, and
    ``dtype``), a scalar (its ``value``: torch.export specialises on it), or a tuple, list or dict
    of inputs (``items``; a dict's keys are the items' names)."""

    name: str
    shape: list[Annotated[int, Field(ge=0)] | str] | None = None
    """A tensor's shape."""
    dtype: DType = "float32"
    low: float | None = None
    """Smallest value of a generated example (integers: inclusive; default 0)."""
    high: float | None = None
    """Largest value of a generated example (integers: exclusive; default 10)."""
    items: list[InputSpec] | None = None
    """The inputs a ``container`` holds, in order: a recurrent state ``(h, c)``, a dict of observations."""
    container: Literal["tuple", "list", "dict"] | None = None
    """What ``items`` make: a tuple (default), a list, or a dict keyed by the items' names."""
    value: StrictBool | StrictInt | StrictFloat | None = None
    """A scalar input's value (``true``, ``3``, ``0.5``): the program is exported for this value."""

    @field_validator("name")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not IDENTIFIER.fullmatch(value):
            raise ValueError(f"input name {value!r} is not a Python identifier; use the name of the forward's parameter")
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        given = [key for key in ("shape", "items", "value") if getattr(self, key) is not None]
        if len(given) != 1:
            raise ValueError(
                f"input {self.name!r}: give one of shape (a tensor), items (a tuple, list or dict of inputs) "
                f"or value (a scalar){', not ' + ' and '.join(given) if given else ''}"
            )
        if self.items is None and self.container is not None:
            raise ValueError(f"input {self.name!r}: container needs items; add items = [...]")
        if self.shape is None:
            extra = sorted({"dtype", "low", "high"} & self.model_fields_set)
            if extra:
                raise ValueError(f"input {self.name!r}: {', '.join(extra)} apply to a tensor (an input with a shape); remove them")
        if self.items is not None:
            names = [item.name for item in self.items]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise ValueError(f"input {self.name!r}: items name {twice[0]!r} twice; give each item its own name")
        return self

    @model_serializer(mode="wrap")
    # No return annotation: pydantic derives the serialization schema from it, and the model's
    # own (its fields) is the true one; any annotation would replace it.
    def _without_unset_kinds(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        """A tensor input dumps as it always did (its program's key stays what it was)."""
        data = handler(self)
        for key in ("items", "container", "value"):
            if data.get(key) is None:
                data.pop(key, None)
        return data

    @property
    def kind(self) -> str:
        if self.value is not None:
            return "scalar"
        if self.items is not None:
            return self.container or "tuple"
        return "tensor"


class MethodSpec(Strict):
    """A method of the program: a callable of the model, exported with example inputs."""

    function: str | None = None
    """The model's attribute to call; default: the method's name (``forward`` for ``forward``)."""
    inputs: list[InputSpec] = Field(min_length=1)
    dims: dict[str, DynamicDim] = {}
    """Dynamic dims of this method, in addition to the model's ``dims``."""
    samples: str | None = None
    """Real inputs of the method: a file (``torch.save`` of a tuple of inputs, or of a list of such
    tuples) or a folder of such files, relative to the manifest; or a factory
    ``"package.module:callable"`` returning them. They calibrate static quantization instead of
    generated noise, and the check runs them beside the generated inputs; their bytes (a
    factory's code) are part of the program's key."""

    @field_validator("samples")
    @classmethod
    def _samples_given(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("samples is empty: give a file, a folder, or a factory 'package.module:callable'")
        return value

    @model_serializer(mode="wrap")
    def _without_unset_samples(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        """A method without samples dumps as it always did (its program's key stays what it was)."""
        data = handler(self)
        if data.get("samples") is None:
            data.pop("samples", None)
        return data


class ModelSpec(Strict):
    """A PyTorch model: built by a factory, with optional weights and a seed."""

    kind: Literal["factory"] = Field("factory", exclude=True)
    """The model's kind: ``factory`` (the default), a Python callable that returns the model."""
    factory: str
    """``"package.module:callable"``, importable from the manifest's folder or the environment."""
    kwargs: dict[str, Any] = {}
    weights: str | None = None
    """The model's weights, path relative to the manifest: a state dict saved with ``torch.save``
    (loaded with weights_only=True), a checkpoint holding one (see ``weights_key``), or a
    ``.safetensors`` file."""
    weights_key: Annotated[str, Field(pattern=WEIGHTS_KEY.pattern)] | None = None
    """The entry of a checkpoint that holds the state dict: ``"model"`` for ``{"model": state_dict,
    "epoch": 3}``, ``"state_dict"`` for Lightning's, or a dotted path (``"state.model"``)."""
    weights_prefix: Annotated[str, Field(min_length=1, pattern=r"^\S+$")] | None = None
    """The prefix of the model's names in the state dict, stripped as it loads: ``"model."`` for a
    PyTorch Lightning module that holds the model as ``self.model``, ``"module."`` for a model saved
    wrapped in DistributedDataParallel. Only the names that begin with it are loaded."""
    seed: int = 0
    sources: list[str] = []
    """Extra files (globs relative to the manifest) whose content the build depends on."""
    dims: dict[str, DynamicDim] = {}
    methods: dict[str, MethodSpec] = Field(min_length=1)

    @field_validator("methods")
    @classmethod
    def _method_names(cls, value: dict[str, MethodSpec]) -> dict[str, MethodSpec]:
        for name, method in value.items():
            for what, candidate in (("method name", name), ("function", method.function)):
                if candidate is None:
                    continue
                if not IDENTIFIER.fullmatch(candidate):
                    raise ValueError(f"{what} {candidate!r} is not a Python identifier; name a method of the model")
                if candidate.startswith("__"):
                    raise ValueError(f"{what} {candidate!r} is a special method; name a method of the model")
        return value

    @field_validator("factory")
    @classmethod
    def _factory_form(cls, value: str) -> str:
        if not FACTORY.fullmatch(value):
            raise ValueError(f"factory {value!r} is not of the form 'package.module:callable'; separate the module and the callable with a colon")
        return value

    @model_validator(mode="after")
    def _key_needs_weights(self) -> Self:
        if self.weights_key is not None and self.weights is None:
            raise ValueError("weights_key names an entry of the weights file: set weights too, or drop weights_key")
        if self.weights_prefix is not None and self.weights is None:
            raise ValueError("weights_prefix is stripped from the weights file's names: set weights too, or drop "
                             "weights_prefix")
        return self
