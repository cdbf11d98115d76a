"""The manifest's data model: what a TOML manifest may say, validated by pydantic.

Every model is frozen and refuses unknown keys. ``ptebuild schema`` prints
``Manifest.model_json_schema()`` for editors.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictFloat,
    StrictInt,
    Tag,
    WithJsonSchema,
    field_validator,
    model_serializer,
    model_validator,
)

from ptebuild.backends import BackendName
from ptebuild.models import DEFAULT_KIND, get_model_kind, model_kind_names

DType = Literal["float32", "float16", "bfloat16", "int32", "int64", "int8", "uint8", "bool"]
DTYPES = get_args(DType)

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WEIGHTS_KEY = re.compile(r"^[^.\s]+(\.[^.\s]+)*$")
_FACTORY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_.]*")


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class DynamicDim(_Strict):
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


class InputSpec(_Strict):
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
        if not _IDENTIFIER.fullmatch(value):
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


class MethodSpec(_Strict):
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


class ModelSpec(_Strict):
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
    weights_key: Annotated[str, Field(pattern=_WEIGHTS_KEY.pattern)] | None = None
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
                if not _IDENTIFIER.fullmatch(candidate):
                    raise ValueError(f"{what} {candidate!r} is not a Python identifier; name a method of the model")
                if candidate.startswith("__"):
                    raise ValueError(f"{what} {candidate!r} is a special method; name a method of the model")
        return value

    @field_validator("factory")
    @classmethod
    def _factory_form(cls, value: str) -> str:
        if not _FACTORY.fullmatch(value):
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


def _size(value: object) -> int:
    from ptebuild.insight.budget import parse_size

    return parse_size(value)


_SIZE_SCHEMA = {
    "anyOf": [
        {"type": "integer", "minimum": 0},
        {"type": "string", "pattern": r"^\s*(\d+(\.\d*)?|\.\d+)\s*([KkMmGgTt][Ii]?[Bb]?|[Bb])?\s*$"},
    ],
    "description": "bytes, or a number with a unit: KiB, MiB, GiB (powers of 1024), KB, MB, GB (powers of 1000)",
}
Size = Annotated[int, BeforeValidator(_size), WithJsonSchema(_SIZE_SCHEMA)]
"""A byte count: an int, or a string with a unit (``"2 MiB"``), read as bytes."""


class BudgetSpec(_Strict):
    """Limits a program's figures must keep (``ptebuild.insight.budget``): a program over one fails
    the build with one line naming the limit, the figure and the budget."""

    max_pte: Size | None = None
    """The largest the ``.pte`` may be."""
    max_ptd: Size | None = None
    """The largest any ``.ptd`` the program loads may be."""
    min_delegated: Annotated[float, Field(ge=0, le=1)] | None = None
    """The smallest fraction of operator nodes delegated (0 to 1; ``getitem`` nodes not counted)."""
    max_planned_memory: Size | None = None
    """The most memory the program's methods may plan, all together."""


class CheckSpec(_Strict):
    """How closely a built program must match eager PyTorch, element by element
    ``|a - e| <= atol + rtol * max(|e|, mean |e|)``, and in cosine similarity. Unset parts
    come from each output's dtype and the backend (and its quantization): ``ptebuild.tolerances``."""

    atol: Annotated[float, Field(ge=0)] | None = None
    rtol: Annotated[float, Field(ge=0)] | None = None
    """The relative part, of each element's magnitude and never less than the output's mean."""
    min_cosine: Annotated[float, Field(ge=-1, le=1)] | None = None
    enabled: bool = True
    min_token_agreement: Annotated[float, Field(ge=0, le=1)] | None = None
    """Language models: the least share of greedy decode steps whose token must agree with the
    eager model's (default 1 for float programs, 0.5 for quantized ones)."""

    @model_serializer(mode="wrap")
    def _without_unset_rtol(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        """A check table without ``rtol`` dumps as it always did (its program's key stays what it was)."""
        data = handler(self)
        if data.get("rtol") is None:
            data.pop("rtol", None)
        return data


class ProgramSpec(_Strict):
    """One ``.pte``: a model lowered for a backend."""

    model: str
    backend: BackendName | None = None
    methods: list[str] | None = None
    """Which of the model's methods the program holds; default: all of them."""
    data_name: str | None = None
    """The ``.ptd`` holding the program's weights (without extension); absent: weights in the ``.pte``."""
    options: dict[str, Any] = {}
    compile_specs: dict[str, Any] = {}
    """Backend compile specs (cuda: platform, max_autotune, ...); validated with ``options``."""
    check: CheckSpec = CheckSpec()
    bundle_io: bool = False
    """Also write ``<program>.bpte``: ExecuTorch's BundledProgram, the program with the check's
    inputs and eager PyTorch's outputs for each method, for a device to verify it."""
    etrecord: bool = False
    """Also write ``<program>.etrecord``: ExecuTorch's ETRecord (for the devtools Inspector)."""
    budget: BudgetSpec | None = None
    """Limits on the program's size, delegation and planned memory (over ``defaults.budget``)."""


class Defaults(_Strict):
    """Settings every program inherits unless it says otherwise."""

    out: str = "out"
    """Output folder, relative to the manifest."""
    backend: BackendName | None = None
    check: CheckSpec = CheckSpec()
    options: dict[BackendName, dict[str, Any]] = {}
    """Backend options by backend name, merged under each program's ``options``."""
    compile_specs: dict[BackendName, dict[str, Any]] = {}
    """Compile specs by backend name, merged under each program's ``compile_specs``."""
    dist: str = "dist"
    """The folder ``ptebuild pack`` writes the manifest's bundles into, relative to the manifest."""
    budget: BudgetSpec | None = None
    """Limits every program keeps, unless its own ``budget`` sets that limit."""


class ShimLibrarySpec(_Strict):
    """A Windows import library (``<name>.lib``) generated from a declared list of shims."""

    source: str
    """A ``.def`` file or the TOML shim-list form, relative to the manifest."""
    format: Literal["gnu", "coff"] = "gnu"
    keep_order: bool = False


class BundleSpec(_Strict):
    """A release bundle: some of the manifest's programs in one archive (``ptebuild pack --bundle NAME``)."""

    programs: list[str] = Field(min_length=1)
    """Program names or globs (``policy_xnnpack*``); each program brings its ``.ptd`` and ``.bpte``."""
    output: str | None = None
    """The archive's file name, ``NAME.tar.gz``, ``NAME.tgz`` or ``NAME.zip``; default ``<bundle>.tar.gz``."""
    include: list[str] = []
    """Extra files (globs relative to the manifest) packed into the bundle under their file names."""
    bundle_io: bool = False
    """Every program of the bundle also writes ``<program>.bpte`` (as ``bundle_io`` on the program)."""
    etrecord: bool = False
    """Every program of the bundle also writes its ETRecord, and the bundle carries them."""


def _model_kind(value: Any) -> str:
    """The kind of a ``[models.NAME]`` table (the union's discriminator): its ``kind``, else ``factory``."""
    kind = value.get("kind", DEFAULT_KIND) if isinstance(value, dict) else getattr(value, "kind", DEFAULT_KIND)
    return kind if isinstance(kind, str) else repr(kind)


def _model_table() -> Any:
    """A ``[models.NAME]`` table: one of the registered model kinds' tables, chosen by its ``kind``."""
    from typing import Union

    tables = tuple(
        Annotated[get_model_kind(name).spec_model(), Tag(name)]
        for name in model_kind_names()
    )
    return Annotated[
        Union[tables],  # noqa: UP007 - a Union of a tuple built at run time
        Discriminator(
            _model_kind,
            custom_error_type="model_kind",
            custom_error_message=f"unknown model kind; give kind = one of {', '.join(map(repr, model_kind_names()))}",
        ),
    ]


if TYPE_CHECKING:
    from ptebuild.models.executorch_llm.spec import LlmModelSpec

    ModelTable = ModelSpec | LlmModelSpec
else:
    ModelTable = _model_table()


class Manifest(_Strict):
    """A ptebuild manifest."""

    defaults: Defaults = Defaults()
    models: dict[str, ModelTable] = {}
    programs: dict[str, ProgramSpec] = {}
    shims: dict[str, ShimLibrarySpec] = {}
    """Import libraries to generate, by output name."""
    bundles: dict[str, BundleSpec] = {}
    """Release bundles, by name: ``ptebuild pack`` writes each one (``--bundle NAME``: one of them)."""

    @model_validator(mode="after")
    def _something_to_build(self) -> Self:
        if not self.programs and not self.shims:
            raise ValueError("declares nothing to build; add a [programs.NAME] or [shims.NAME] table")
        return self


def json_schema() -> dict[str, Any]:
    """The manifest's JSON Schema (draft 2020-12), for editors.

    ``options`` and ``compile_specs`` are open tables in the pydantic models (their keys depend on
    the program's backend); here each backend's options model fills them in: under
    ``defaults.options.<backend>`` and ``defaults.compile_specs.<backend>``, and, for a program
    that names its backend, under its own ``options`` and ``compile_specs``. Both tables feed the
    one options model, so both accept its keys; unknown keys are flagged. A program of a model
    kind that gives its programs options of its own (an LLM's ``qmode``...) takes those instead:
    a program's tables are then one of the backend's and the kinds' (``anyOf``). Installed plug-in
    backends are there too; one that cannot be loaded has no options here
    (:func:`ptebuild.backends.plugin_problems` says why).
    """
    from ptebuild.backends import backend_names, get_backend
    from ptebuild.errors import PluginError

    schema = Manifest.model_json_schema()
    defs = schema.setdefault("$defs", {})
    refs: dict[str, Any] = {}
    program_refs: dict[str, Any] = {}

    def define(model: Any, description: str) -> dict[str, str]:
        own = model.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(own.pop("$defs", {}))
        own.setdefault("description", description)
        defs[model.__name__] = own
        return {"$ref": f"#/$defs/{model.__name__}"}

    for name in backend_names():
        try:
            model = get_backend(name).options_model
        except PluginError:  # a plug-in that cannot be loaded: no options to show (ptebuild schema says why)
            continue
        refs[name] = define(model, f"Options and compile specs of the {name} backend.")
        kinds = [(kind, get_model_kind(kind).program_options_model(name)) for kind in model_kind_names()]
        own = [define(model, f"Options of a {name} program of a {kind} model.") for kind, model in kinds if model is not None]
        program_refs[name] = {"anyOf": [refs[name], *own]} if own else refs[name]
    for table in ("options", "compile_specs"):
        defaults = defs["Defaults"]["properties"][table]
        defaults.pop("propertyNames", None)
        defaults["properties"] = dict(refs)
        defaults["additionalProperties"] = False
    defs["ProgramSpec"]["allOf"] = [
        {
            "if": {"properties": {"backend": {"const": name}}, "required": ["backend"]},
            "then": {"properties": {"options": ref, "compile_specs": ref}},
        }
        for name, ref in program_refs.items()
    ]
    _refine(schema, defs)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "ptebuild manifest"
    return schema


CLI_ONLY_CHECKS = (
    "dims: min <= max, example within [min, max], all multiples of multiple_of (an example of 2 blocks or more)",
    "programs.NAME.model names a declared model",
    "a shape names a declared dynamic dim",
    "programs.NAME.methods name methods of the model",
    "bundles.NAME.programs match declared programs",
    "what the backend needs when only [defaults] names it (data_name, fixed shapes)",
    "names that differ only in case (one file on macOS and Windows)",
    "files the manifest names exist (weights, sources, shim lists, include globs, a language model's params, tokenizer and checkpoint)",
    "what a program takes that depends on the kind of the model it names "
    "(a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "a language model's max_context_length >= max_seq_length",
    "the factory's module can be imported",
    "a key given in both options and compile_specs",
)
"""What ``ptebuild`` checks that the JSON Schema cannot (the docs list them: docs/manifest.md).

JSON Schema (2020-12) validates each value against fixed rules: it cannot compare two values of
the document (``min <= max``: the ``$data`` proposal was never adopted), nor check that a value
names a key declared elsewhere in it (an enum built from the manifest's own ``models`` is not a
static schema), nor look at files or the Python environment."""


def _refine(schema: dict[str, Any], defs: dict[str, Any]) -> None:
    """Add what pydantic's validators check but its schema does not say, where JSON Schema can say it."""
    from ptebuild.backends import backend_names, get_backend
    from ptebuild.errors import PluginError
    from ptebuild.names import name_json_schema

    identifier = {"type": "string", "pattern": f"^{_IDENTIFIER.pattern}$"}
    method_name = {**identifier, "not": {"pattern": "^__"}}
    schema["properties"]["programs"]["propertyNames"] = name_json_schema(".pte")
    schema["properties"]["shims"]["propertyNames"] = name_json_schema(".lib")
    schema["properties"]["bundles"]["propertyNames"] = name_json_schema(".tar.gz")
    schema["anyOf"] = [
        {"required": ["programs"], "properties": {"programs": {"minProperties": 1}}},
        {"required": ["shims"], "properties": {"shims": {"minProperties": 1}}},
    ]
    # Without a default backend, every program names its own.
    schema["if"] = {"required": ["defaults"], "properties": {"defaults": {"required": ["backend"]}}}
    schema["else"] = {"properties": {"programs": {"additionalProperties": {"required": ["backend"]}}}}
    model = defs["ModelSpec"]
    model["properties"]["factory"]["pattern"] = f"^{_FACTORY.pattern}$"
    model["properties"]["methods"]["propertyNames"] = method_name
    model["dependentRequired"] = {"weights_key": ["weights"], "weights_prefix": ["weights"]}
    defs["MethodSpec"]["properties"]["function"]["anyOf"][0].update(method_name)
    spec = defs["InputSpec"]
    spec["properties"]["name"].update(identifier)
    spec["oneOf"] = [{"required": [kind]} for kind in ("shape", "items", "value")]
    spec["dependentRequired"] = {"container": ["items"], "dtype": ["shape"], "low": ["shape"], "high": ["shape"]}
    program = defs["ProgramSpec"]
    program["properties"]["data_name"]["anyOf"][0] = name_json_schema(".ptd")
    program["properties"]["methods"]["anyOf"][0].update(minItems=1, uniqueItems=True)
    bundle = defs["BundleSpec"]["properties"]
    bundle["output"]["anyOf"][0]["pattern"] = "(\\.[Tt][Aa][Rr]\\.[Gg][Zz]|\\.[Tt][Gg][Zz]|\\.[Zz][Ii][Pp])$"
    for globs in (bundle["include"], *(defs[d]["properties"]["sources"] for d in ("ModelSpec", "LlmModelSpec") if d in defs)):
        globs["items"].update(minLength=1, **{"not": {"pattern": "^/|(^|/)\\.\\.(/|$)"}})  # inside the manifest's folder (paths.glob_problem)
    for name in backend_names():  # what a backend needs of a program that names it
        try:
            backend = get_backend(name)
        except PluginError:  # a plug-in that cannot be loaded: nothing to say of it (ptebuild schema says why)
            continue
        needs: dict[str, Any] = {}
        if backend.requires_data_name:
            needs = {"required": ["data_name"]}
        elif backend.keeps_data_in_pte:
            needs = {"not": {"required": ["data_name"]}}
        if needs:
            program["allOf"].append({"if": {"properties": {"backend": {"const": name}}, "required": ["backend"]}, "then": needs})
