"""The manifest's data model: what a TOML manifest may say, validated by pydantic.

A ``[models.NAME]`` table is its model kind's own (:func:`_model_table`: the factory kind's
:class:`~ptebuild.models.factory.spec.ModelSpec`, a language model's...); the rest is here.
Every model is frozen and refuses unknown keys. ``ptebuild schema`` prints
``Manifest.model_json_schema()`` for editors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    Tag,
    WithJsonSchema,
    model_serializer,
    model_validator,
)

from ptebuild.backends import BackendName
from ptebuild.models import DEFAULT_KIND, get_model_kind, model_kind_names
from ptebuild.models.factory.spec import FACTORY, IDENTIFIER, STRICT, ModelSpec


class _Strict(BaseModel):
    model_config = STRICT


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


class MethodBudgetSpec(_Strict):
    """Limits one method of a program must keep (a program of several methods: an encoder that must
    be delegated whole, a decoder whose planned memory is bounded)."""

    min_delegated: Annotated[float, Field(ge=0, le=1)] | None = None
    """The smallest fraction of the method's operator nodes delegated (0 to 1)."""
    max_planned_memory: Size | None = None
    """The most memory the method may plan."""


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
    methods: dict[str, MethodBudgetSpec] | None = None
    """Limits of single methods, by method name (``methods.text_decoder.max_planned_memory``)."""


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
    "a multimodal model's params.json has its family's keys",
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

    identifier = {"type": "string", "pattern": f"^{IDENTIFIER.pattern}$"}
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
    model["properties"]["factory"]["pattern"] = f"^{FACTORY.pattern}$"
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
        globs["items"].update(minLength=1, **{"not": {"pattern": "^/|(^|/)\\.\\.(/|$)"}})  # inside the manifest's folder (path_problems.glob_problem)
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
