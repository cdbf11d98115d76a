"""The build plan: a validated manifest resolved into plain, JSON-able records.

Everything downstream (keys, builder, workers, the no-op fast path) works from these frozen
dataclasses, never from the pydantic models, so that a build whose manifest has not changed can
skip validation altogether (see :mod:`ptebuild.manifest.load`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptebuild.canonical import canonical_json

if TYPE_CHECKING:
    from ptebuild.tolerances import CheckSettings

CONTAINERS = ("tuple", "list", "dict")
"""The kinds of input that hold other inputs."""


@dataclass(frozen=True)
class InputPlan:
    """One input of a method: a tensor (``kind`` "tensor": ``shape``, ``dtype``, ``low``/``high``),
    a scalar (``"scalar"``: ``value``), or a ``"tuple"``, ``"list"`` or ``"dict"`` of ``items``
    (a dict's keys are its items' names)."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str
    low: float | None = None
    high: float | None = None
    kind: str = "tensor"
    items: tuple[InputPlan, ...] = ()
    value: bool | int | float | None = None

    def leaves(self) -> list[InputPlan]:
        """The tensors and scalars under this input, in order."""
        if self.kind in CONTAINERS:
            return [leaf for item in self.items for leaf in item.leaves()]
        return [self]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> InputPlan:
        return cls(**{**data, "shape": tuple(data.get("shape") or ()),
                      "items": tuple(cls.from_json(i) for i in data.get("items") or ())})


@dataclass(frozen=True)
class DimPlan:
    name: str
    min: int
    max: int
    example: int
    multiple_of: int = 1
    """Every size is a multiple of this (min, max and example are)."""


@dataclass(frozen=True)
class MethodPlan:
    name: str
    function: str
    inputs: tuple[InputPlan, ...]
    dims: tuple[DimPlan, ...]
    samples: str | None = None
    """Real inputs (:mod:`ptebuild.lowering.samples`): a file or folder relative to the manifest's
    folder, or a factory ``package.module:callable``; None: generated inputs only."""

    def leaves(self) -> list[InputPlan]:
        """The tensors and scalars of the method's inputs, in torch.export's order."""
        return [leaf for spec in self.inputs for leaf in spec.leaves()]

    def example_shape(self, spec: InputPlan) -> tuple[int, ...]:
        sizes = {dim.name: dim.example for dim in self.dims}
        return tuple(sizes[d] if isinstance(d, str) else d for d in spec.shape)


@dataclass(frozen=True)
class Limit:
    """One limit of a program's budget (:mod:`ptebuild.insight.budget`): ``max_pte``, ``max_ptd``,
    ``max_planned_memory`` (bytes) or ``min_delegated`` (a fraction), and where the manifest sets
    it (``programs.X.budget`` or ``defaults.budget``)."""

    name: str
    value: float
    where: str
    method: str = ""
    """The method it bounds (``programs.X.budget.methods.M``); empty: the whole program."""

    @property
    def location(self) -> str:
        return f"{self.where}.{self.name}"


@dataclass(frozen=True)
class Budget:
    """A program's budget: its limits. Not part of the program's action key (judged after a build
    or a restore), so that a changed budget judges a cached program again without lowering it."""

    limits: tuple[Limit, ...]

    def limit(self, name: str) -> Limit | None:
        return next((limit for limit in self.limits if limit.name == name), None)


@dataclass(frozen=True)
class ProgramPlan:
    name: str
    model: str
    backend: str
    factory: str
    kwargs: dict[str, Any]
    weights: str | None
    """Path of the weights file relative to the manifest folder."""
    seed: int
    sources: tuple[str, ...]
    methods: tuple[MethodPlan, ...]
    data_name: str | None
    options: dict[str, Any]
    atol: float
    """The check's ``atol`` for float32 outputs: the manifest's, else the backend's default
    (:meth:`check_settings` gives each output's by its dtype)."""
    min_cosine: float
    check_enabled: bool
    model_entry: dict[str, Any]
    """The model's manifest entry, normalised: what the action key hashes."""
    program_entry: dict[str, Any]
    """The program's manifest entry with defaults applied, normalised."""
    bundle_io: bool = False
    """Also write ``<name>.bpte``: ExecuTorch's BundledProgram, the program with its test cases
    (the check's inputs and eager PyTorch's outputs for each method)."""
    weights_key: str | None = None
    """The checkpoint entry holding the state dict (a key or a dotted path); None: the file is one."""
    weights_prefix: str | None = None
    """The prefix of the model's names in the state dict (stripped; other names are not loaded)."""
    etrecord: bool = False
    """Also write ``<name>.etrecord``: ExecuTorch's ETRecord of the lowering (what the devtools
    Inspector needs to map an on-device ETDump back to the graph)."""
    budget: Budget | None = None
    """The limits its figures must keep (:mod:`ptebuild.insight.budget`); None: no budget."""
    rtol: float = 0.0
    """The check's ``rtol`` for float32 outputs, as ``atol``."""
    calibrated: bool = False
    """Its quantization is calibrated on inputs (:meth:`~ptebuild.backends.base.Backend.calibrates`):
    on the methods' samples where they have some, and the check's generated inputs follow them."""
    check_set: tuple[str, ...] = ()
    """The parts of the tolerance the manifest sets (``atol``, ``rtol``, ``min_cosine``): they
    hold for every output; the others follow each output's dtype."""
    kind: str = "factory"
    """The model's kind (:mod:`ptebuild.models`): how it is made, lowered and checked."""
    model_files: tuple[tuple[str, str], ...] = ()
    """``(manifest field, path)`` of files the model's kind reads besides its code and weights (an
    LLM's params JSON and tokenizer), paths relative to the manifest folder: sources of the key."""
    extra_outputs: tuple[str, ...] = ()
    """Files the program writes beside its ``.pte`` (an LLM's tokenizer), published with it."""
    min_token_agreement: float | None = None
    """Generated-token checks (LLM programs): the least share of decode steps whose tokens must
    agree with the eager model's."""
    bound: object = field(default=None, compare=False, repr=False)
    """The program's backend resolved once (:class:`ptebuild.backends.BoundBackend`: the registry's
    object and ``options`` typed, validated when the manifest was resolved); asked for through
    :func:`ptebuild.backends.bound_backend`. Not part of the JSON form: a plan read back from JSON is
    bound again (:func:`ptebuild.backends.bind_plan`), its options validated at most once, and only
    where they are used typed (a worker), so that the builder's no-op path never imports pydantic."""

    def check_settings(self) -> CheckSettings:
        """The tolerances the check holds this program's outputs to (:mod:`ptebuild.tolerances`)."""
        from ptebuild.tolerances import CheckSettings, Tolerance

        given = {part: getattr(self, part) for part in self.check_set}
        return CheckSettings(Tolerance(self.atol, self.rtol, self.min_cosine), **given)

    def to_json(self) -> dict[str, Any]:
        """The plain, JSON-able form (without :attr:`bound`): what a task carries to its worker."""
        document = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "bound"}
        document["methods"] = [asdict(m) for m in self.methods]
        document["budget"] = {"limits": [{k: v for k, v in asdict(limit).items() if k != "method" or v}  # a program's own: as before
                                         for limit in self.budget.limits]} if self.budget is not None else None
        plain: dict[str, Any] = json.loads(canonical_json(document))
        return plain

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProgramPlan:
        methods = tuple(
            MethodPlan(
                name=m["name"],
                function=m["function"],
                inputs=tuple(InputPlan.from_json(i) for i in m["inputs"]),
                dims=tuple(DimPlan(**d) for d in m["dims"]),
                samples=m.get("samples"),
            )
            for m in data["methods"]
        )
        budget = data.get("budget")
        return cls(**{**data, "methods": methods, "sources": tuple(data["sources"]),
                      "check_set": tuple(data.get("check_set") or ()),
                      "budget": Budget(tuple(Limit(**limit) for limit in budget["limits"])) if budget else None,
                      "model_files": tuple(tuple(pair) for pair in data.get("model_files", ())),
                      "extra_outputs": tuple(data.get("extra_outputs", ()))})

    @property
    def pte_name(self) -> str:
        return f"{self.name}.pte"

    @property
    def ptd_name(self) -> str | None:
        return f"{self.data_name}.ptd" if self.data_name else None

    @property
    def bpte_name(self) -> str | None:
        return f"{self.name}.bpte" if self.bundle_io else None

    @property
    def etrecord_name(self) -> str | None:
        return f"{self.name}.etrecord" if self.etrecord else None

    @property
    def output_names(self) -> tuple[str, ...]:
        return (self.pte_name, *(name for name in (self.ptd_name, self.bpte_name, self.etrecord_name) if name), *self.extra_outputs)

    def model_file(self, field: str) -> str | None:
        """The path of the model file the manifest gives as ``field`` (``params``, ``tokenizer``)."""
        return next((path for name, path in self.model_files if name == field), None)


@dataclass(frozen=True)
class ShimPlan:
    name: str
    source: str
    """Path of the shim list relative to the manifest folder."""
    format: str
    keep_order: bool

    @property
    def lib_name(self) -> str:
        return f"{self.name}.lib"

    @property
    def output_names(self) -> tuple[str, ...]:
        return (self.lib_name,)


@dataclass(frozen=True)
class BundlePlan:
    """A release bundle the manifest declares (``[bundles.NAME]``): some of its programs, packed
    into one archive by ``ptebuild pack --bundle NAME``."""

    name: str
    programs: tuple[str, ...]
    """The programs it holds (globs resolved), sorted; each brings its ``.ptd`` and ``.bpte``."""
    archive: str
    """The archive's file name (``<name>.tar.gz`` unless the manifest names it)."""
    include: tuple[str, ...] = ()
    """Globs of extra files, relative to the manifest folder (resolved when packing)."""
    etrecords: tuple[str, ...] = ()
    """The ETRecord files it carries: every program's when the bundle asks (``etrecord = true``),
    else those of the programs that ask themselves (another bundle's asking does not bring them)."""


@dataclass(frozen=True)
class BuildPlan:
    manifest: str
    """The manifest path as the user gave it (for messages)."""
    manifest_dir: str
    out: str
    """The output folder, relative to the manifest folder unless absolute."""
    programs: tuple[ProgramPlan, ...]
    shims: tuple[ShimPlan, ...] = field(default=())
    bundles: tuple[BundlePlan, ...] = field(default=())
    dist: str = "dist"
    """The folder bundles are packed into, relative to the manifest folder unless absolute."""

    def out_dir(self) -> Path:
        return Path(os.path.normpath(Path(self.manifest_dir, self.out)))

    def dist_dir(self) -> Path:
        return Path(os.path.normpath(Path(self.manifest_dir, self.dist)))

    def bundle(self, name: str) -> BundlePlan | None:
        return next((b for b in self.bundles if b.name == name), None)

    def to_json(self) -> str:
        document = {f.name: getattr(self, f.name) for f in fields(self)}
        document["programs"] = [p.to_json() for p in self.programs]
        document["shims"] = [asdict(s) for s in self.shims]
        document["bundles"] = [asdict(b) for b in self.bundles]
        return canonical_json(document)

    @classmethod
    def from_json(cls, text: str, *, manifest: str, manifest_dir: str) -> BuildPlan:
        data = json.loads(text)
        programs = [ProgramPlan.from_json(p) for p in data["programs"]]
        shims = tuple(ShimPlan(**s) for s in data["shims"])
        bundles = tuple(
            BundlePlan(**{**b, "programs": tuple(b["programs"]), "include": tuple(b["include"]),
                          "etrecords": tuple(b.get("etrecords") or ())})
            for b in data.get("bundles", ())
        )
        return cls(
            manifest=manifest,
            manifest_dir=manifest_dir,
            out=data["out"],
            programs=tuple(programs),
            shims=shims,
            bundles=bundles,
            dist=data.get("dist", "dist"),
        )

    def shared_data(self) -> dict[str, tuple[str, ...]]:
        """Data names that several programs share -> those programs (their weights go in one ``.ptd``)."""
        users: dict[str, list[str]] = {}
        for p in self.programs:
            if p.data_name:
                users.setdefault(p.data_name, []).append(p.name)
        return {name: tuple(programs) for name, programs in users.items() if len(programs) > 1}

    def select(self, names: list[str]) -> BuildPlan:
        """The plan restricted to the programs and shim libraries called ``names``, and the
        programs that share a data name with one of them (a shared ``.ptd`` is written whole)."""
        wanted = set(names)
        for programs in self.shared_data().values():
            if wanted & set(programs):
                wanted |= set(programs)
        return BuildPlan(
            manifest=self.manifest,
            manifest_dir=self.manifest_dir,
            out=self.out,
            programs=tuple(p for p in self.programs if p.name in wanted),
            shims=tuple(s for s in self.shims if s.name in wanted),
        )
