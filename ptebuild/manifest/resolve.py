"""Cross-check a validated manifest and resolve it into a :class:`BuildPlan`.

Checks what pydantic cannot see alone: references between tables (a program's model and
methods, a shape's dynamic dims), backend options, output names and their collisions, and that
each factory module exists. Nothing here imports torch or the model code.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptebuild.backends import BoundBackend, get_backend
from ptebuild.backends.options import BackendOptions
from ptebuild.errors import DataNameError, ManifestError
from ptebuild.insight.budget import merged_budget
from ptebuild.manifest.locations import describe_validation_error, dotted
from ptebuild.manifest.modules import find_module_file, module_search_path
from ptebuild.manifest.schema import BundleSpec, Manifest, ProgramSpec
from ptebuild.manifest.typos import did_you_mean
from ptebuild.models import get_model_kind
from ptebuild.names import case_key, name_problem
from ptebuild.path_problems import describe, file_problem, glob_problem
from ptebuild.plan import (
    BuildPlan,
    BundlePlan,
    ProgramPlan,
    ShimPlan,
)
from ptebuild.runtime.record import RECORD_NAME

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ptebuild.backends.base import Backend
    from ptebuild.models.base import ResolvedModel

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".zip")
"""What a bundle's ``output`` may end in (the archive formats ``ptebuild pack`` writes)."""


def _check_name(display: str, where: str, name: str, extension: str) -> None:
    problem = name_problem(name, extension=extension)
    if problem:
        raise DataNameError(f"{display}: {where}: name {name!r} {problem}")


def _resolve_program(
    display: str, manifest: Manifest, name: str, program: ProgramSpec, models: dict[str, ResolvedModel],
    bundle_io: bool = False, etrecord: bool = False, manifest_dir: Path | None = None,
) -> ProgramPlan:

    where = dotted(("programs", name))
    _check_name(display, where, name, ".pte")
    if program.model not in manifest.models:
        raise ManifestError(
            f"{display}: {where}.model: unknown model {program.model!r}"
            f"{did_you_mean(program.model, manifest.models)}; declare it as [{dotted(('models', program.model))}]"
        )
    model = manifest.models[program.model]
    kind = get_model_kind(model.kind)
    resolved = models[program.model]
    backend_name = program.backend or manifest.defaults.backend
    if backend_name is None:
        raise ManifestError(
            f"{display}: {where}.backend: missing; set backend here or in [defaults]"
        )
    backend = get_backend(backend_name)
    options = _resolve_options(display, manifest, name, program, backend_name, backend, kind.program_options_model(backend_name))
    methods = kind.program_methods(resolved.methods, options)
    # A program's methods are a set: sorted, so that reordering the manifest changes nothing.
    chosen = sorted(program.methods) if program.methods is not None else sorted(methods)
    if not chosen:
        raise ManifestError(f"{display}: {where}.methods: empty; list at least one method or leave it out")
    if methods is not resolved.methods and program.methods is not None and sorted(set(program.methods)) != sorted(methods):
        raise ManifestError(f"{display}: {where}.methods: program {name!r} holds every method its options name "
                            f"({', '.join(sorted(methods))}); remove methods here")
    for method in chosen:
        if method not in methods:
            raise ManifestError(
                f"{display}: {where}.methods: model {program.model!r} has no method {method!r}"
                f"{did_you_mean(method, methods)}; name one of {', '.join(methods)}"
            )
    if len(set(chosen)) != len(chosen):
        raise ManifestError(f"{display}: {where}.methods: lists a method twice; list each once")
    problem = kind.program_problem(model, backend_name, backend, options, program.data_name)
    if problem is not None:
        raise ManifestError(f"{display}: {where}.{problem[0]}: {problem[1]}")
    if backend.static_shapes:
        dynamic = next((methods[m] for m in chosen if methods[m].dims), None)
        if dynamic is not None:
            dims = ", ".join(d.name for d in dynamic.dims)
            raise ManifestError(
                f"{display}: {where}.methods: method {dynamic.name!r} has dynamic dims ({dims}) and backend "
                f"{backend_name!r} {backend.static_shapes}; give this program a model whose shapes are fixed"
            )
    if program.data_name is None and backend.requires_data_name:
        raise DataNameError(
            f"{display}: {where}.data_name: missing; backend {backend_name!r} writes its weights to a .ptd: "
            f"set data_name (e.g. data_name = \"{name}_weights\")"
        )
    if program.data_name is not None:
        if backend.keeps_data_in_pte:
            raise DataNameError(
                f"{display}: {where}.data_name: backend {backend_name!r} keeps its data inside the .pte "
                "and cannot write a .ptd; remove data_name"
            )
        _check_name(display, f"{where}.data_name", program.data_name, ".ptd")
    check = program.check
    defaults = manifest.defaults.check
    atol = check.atol if check.atol is not None else defaults.atol
    rtol = check.rtol if check.rtol is not None else defaults.rtol
    min_cosine = check.min_cosine if check.min_cosine is not None else defaults.min_cosine
    min_token_agreement = check.min_token_agreement if check.min_token_agreement is not None else defaults.min_token_agreement
    if check.min_token_agreement is not None and not kind.generates_text:
        raise ManifestError(
            f"{display}: {where}.check.min_token_agreement: model {program.model!r} is not a language model "
            f"({model.kind} model); remove it"
        )
    options_json = options.model_dump(mode="json")
    tolerance = kind.check_defaults(backend, options)
    given = {"atol": atol, "rtol": rtol, "min_cosine": min_cosine}
    program_entry = program.model_dump(mode="json")
    program_entry.pop("compile_specs", None)  # merged into options, which the key hashes
    program_entry.update(
        backend=backend_name,
        methods=chosen,
        options=options.model_dump(mode="json"),
    )
    # Set here or by a bundle; absent when off, so that programs without it keep their keys.
    program_entry.pop("bundle_io", None)
    if bundle_io and kind.no_test_cases:
        at = f"{where}.bundle_io" if program.bundle_io else "bundles (bundle_io = true)"
        raise ManifestError(f"{display}: {at}: program {name!r} writes no .bpte: {kind.no_test_cases}; "
                            "leave bundle_io off for it")
    if bundle_io:
        program_entry["bundle_io"] = True
    program_entry.pop("etrecord", None)
    if etrecord and kind.no_etrecord:
        at = f"{where}.etrecord" if program.etrecord else "bundles (etrecord = true)"
        raise ManifestError(f"{display}: {at}: program {name!r} writes no ETRecord: {kind.no_etrecord}; "
                            "leave etrecord off for it")
    if etrecord:
        program_entry["etrecord"] = True
    # Judged after the build or a restore, never keyed: a new budget does not lower again.
    program_entry.pop("budget", None)
    defaults_budget = manifest.defaults.budget.model_dump() if manifest.defaults.budget else None
    for method in (program.budget.methods or {}) if program.budget else ():
        if method not in chosen:
            raise ManifestError(f"{display}: {where}.budget.methods.{method}: program {name!r} has no method {method!r}"
                                f"{did_you_mean(method, chosen)}; name one of {', '.join(chosen)}")
    budget = merged_budget(defaults_budget, program.budget.model_dump() if program.budget else None, name, chosen)
    # Absent when unset, so that programs without it keep their keys.
    if program_entry.get("check", {}).get("min_token_agreement") is None:
        program_entry.get("check", {}).pop("min_token_agreement", None)
    extra_outputs = kind.extra_outputs(name, resolved, options)
    program_files = kind.program_files(options)
    for index, pattern in enumerate(resolved.sources):
        not_a_glob = glob_problem(pattern)
        if not_a_glob:
            raise ManifestError(f"{display}: {dotted(('models', program.model, 'sources', index))}: {pattern!r} {not_a_glob}; "
                                "give globs of files relative to the manifest")
    for key, path in program_files:
        unreadable = file_problem(manifest_dir / path) if manifest_dir is not None else None  # offline: not there
        if unreadable:
            raise ManifestError(f"{display}: {where}.{key}: {describe(path, unreadable)}")
    for extra in extra_outputs:
        if extra.endswith(".ptd"):
            _check_name(display, f"{where}.options", extra.removesuffix(".ptd"), ".ptd")
    return ProgramPlan(
        name=name,
        model=program.model,
        backend=backend_name,
        factory=resolved.factory,
        kwargs=dict(resolved.kwargs),
        weights=resolved.weights,
        seed=resolved.seed,
        sources=resolved.sources,
        methods=tuple(methods[m] for m in chosen),
        data_name=program.data_name,
        options=options_json,
        atol=atol if atol is not None else tolerance.atol,
        rtol=rtol if rtol is not None else tolerance.rtol,
        min_cosine=min_cosine if min_cosine is not None else tolerance.min_cosine,
        check_set=tuple(part for part, value in given.items() if value is not None),
        calibrated=backend.calibrates(options),
        check_enabled=check.enabled and defaults.enabled,
        weights_key=getattr(model, "weights_key", None),  # a factory's model; a language model names its checkpoint
        weights_prefix=getattr(model, "weights_prefix", None),
        model_entry=_model_entry(model),
        program_entry=program_entry,
        bundle_io=bundle_io,
        etrecord=etrecord,
        budget=budget,
        kind=kind.name,
        model_files=resolved.model_files + program_files,
        extra_outputs=extra_outputs,
        min_token_agreement=min_token_agreement,
        bound=BoundBackend(backend_name, options_json, options),  # validated here, and nowhere again
    )


def _model_entry(model: BaseModel) -> dict[str, Any]:
    """The model's entry as its programs' keys hash it; ``weights_key`` and ``weights_prefix`` only
    where they are set, so that models without them keep their keys."""
    entry = model.model_dump(mode="json")
    for optional in ("weights_key", "weights_prefix"):
        if entry.get(optional) is None:
            entry.pop(optional, None)
    return entry


def _resolve_options(
    display: str, manifest: Manifest, name: str, program: ProgramSpec, backend_name: str, backend: Backend,
    options_model: type[BaseModel] | None = None,
) -> BackendOptions:
    """Validate a program's ``options`` and ``compile_specs`` (over the defaults') with ``options_model``
    (the backend's, or the one the model's kind gives its programs for that backend).

    Both tables feed one options model; a key may be given in only one of a program's two tables.
    An error names the table the offending key came from.
    """
    from pydantic import ValidationError

    tables = [
        (("defaults", "options", backend_name), manifest.defaults.options.get(backend_name, {})),
        (("defaults", "compile_specs", backend_name), manifest.defaults.compile_specs.get(backend_name, {})),
        (("programs", name, "options"), program.options),
        (("programs", name, "compile_specs"), program.compile_specs),
    ]
    both = sorted(set(program.options) & set(program.compile_specs))
    if both:
        raise ManifestError(
            f"{display}: {dotted(('programs', name, 'compile_specs', both[0]))}: also set in "
            f"programs.{name}.options; keep one"
        )
    merged: dict[str, Any] = {}
    for _, table in tables:
        merged.update(table)
    options_model = options_model or backend.options_model
    try:
        options = options_model.model_validate(merged)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]["loc"]
        prefix = ("programs", name, "compile_specs" if program.compile_specs else "options")
        if first:
            for where, table in reversed(tables):
                if first[0] in table:
                    prefix = where
                    break
        raise ManifestError(describe_validation_error(exc, display, options_model, prefix=prefix)) from None
    assert isinstance(options, BackendOptions)
    shim = getattr(options, "shim_library", None)
    if shim is not None:
        at = dotted(("programs", name, "compile_specs", "shim_library"))
        if shim not in manifest.shims:
            raise ManifestError(
                f"{display}: {at}: no shim target {shim!r}{did_you_mean(shim, manifest.shims)}; "
                f"declare it as [{dotted(('shims', shim))}]"
            )
        required = backend.shim_library_name
        if required and shim != required:
            raise ManifestError(
                f"{display}: {at}: AOTInductor links {required}.lib; name the shim target {required!r}"
            )
    return options


def check_collisions(display: str, plan: BuildPlan) -> None:
    """Refuse two outputs that are one file: equal names, or names equal but for case.

    Programs may share a data name: they write one ``.ptd`` together (the union of their weights).
    """
    owners: dict[str, tuple[str, str]] = {case_key(RECORD_NAME): (RECORD_NAME, "ptebuild's build record")}
    shared = {p.ptd_name for p in plan.programs if p.ptd_name}
    for target in list(plan.programs) + list(plan.shims):
        kind = "program" if isinstance(target, ProgramPlan) else "shim library"
        for file_name in target.output_names:
            owner = f"{kind} {target.name!r}"
            key = case_key(file_name)
            if key in owners:
                other_name, other_owner = owners[key]
                if other_name == file_name and file_name in shared and other_owner.startswith("program "):
                    continue  # a shared weights file
                if other_name == file_name:
                    what = f"both write {file_name!r}; give one of them another name"
                else:
                    what = (
                        f"write {other_name!r} and {file_name!r}, one file on macOS and Windows; "
                        "choose names that differ in more than case"
                    )
                raise DataNameError(f"{display}: {other_owner} and {owner} {what}")
            owners[key] = (file_name, owner)


def resolve(manifest: Manifest, *, display: str, manifest_dir: Path, offline: bool = False) -> BuildPlan:
    """The plan of a validated manifest. ``offline``: the manifest away from its project (in a
    release bundle): its factory modules and shim lists are not looked for."""
    search_path = module_search_path(manifest_dir)
    models: dict[str, ResolvedModel] = {}
    for model_name, model in manifest.models.items():
        resolved = get_model_kind(model.kind).resolve(model, display=display, model_name=model_name, manifest_dir=manifest_dir,
                                                        offline=offline)
        models[model_name] = resolved
        module = resolved.factory.split(":", 1)[0]
        if resolved.factory and not offline and find_module_file(module, search_path) is None:
            users = sorted(p for p, spec in manifest.programs.items() if spec.model == model_name)
            for_whom = f" (used by program {users[0]!r})" if users else ""
            raise ManifestError(
                f"{display}: models.{model_name}.factory: cannot import {module!r}{for_whom}: "
                f"no module named {module!r} in {manifest_dir} or the environment; put it beside the manifest or install it"
            )
    members = {name: _bundle_programs(display, name, spec, list(manifest.programs)) for name, spec in manifest.bundles.items()}
    with_io = {p for p, spec in manifest.programs.items() if spec.bundle_io}
    with_io |= {p for name, spec in manifest.bundles.items() if spec.bundle_io for p in members[name]}
    with_etrecord = {p for p, spec in manifest.programs.items() if spec.etrecord}
    with_etrecord |= {p for name, spec in manifest.bundles.items() if spec.etrecord for p in members[name]}
    programs = tuple(
        _resolve_program(display, manifest, name, spec, models, bundle_io=name in with_io, etrecord=name in with_etrecord,
                         manifest_dir=None if offline else manifest_dir)
        for name, spec in manifest.programs.items()
    )
    shims = []
    for name, spec in manifest.shims.items():
        _check_name(display, dotted(("shims", name)), name, ".lib")
        problem = None if offline else file_problem(manifest_dir / spec.source)
        if problem:
            raise ManifestError(f"{display}: shims.{name}.source: {describe(spec.source, problem)}; give a .def or shim-list file")
        shims.append(ShimPlan(name=name, source=spec.source, format=spec.format, keep_order=spec.keep_order))
    bundles = tuple(
        _resolve_bundle(display, name, spec, members[name], manifest) for name, spec in sorted(manifest.bundles.items())
    )
    plan = BuildPlan(
        manifest=display,
        manifest_dir=str(manifest_dir),
        out=manifest.defaults.out,
        programs=programs,
        shims=tuple(shims),
        bundles=bundles,
        dist=manifest.defaults.dist,
    )
    check_collisions(display, plan)
    _check_bundle_collisions(display, bundles)
    return plan


_GLOB_CHARACTERS = frozenset("*?[")


def _bundle_programs(display: str, bundle: str, spec: BundleSpec, programs: list[str]) -> tuple[str, ...]:
    """The programs a bundle's ``programs`` names (names or globs), sorted; ManifestError for a
    name the manifest does not declare or a glob that matches none."""
    found: set[str] = set()
    for index, pattern in enumerate(spec.programs):
        where = f"{dotted(('bundles', bundle, 'programs'))}[{index}]"
        if _GLOB_CHARACTERS & set(pattern):
            matches = [p for p in programs if fnmatch.fnmatchcase(p, pattern)]
            if not matches:
                raise ManifestError(
                    f"{display}: {where}: {pattern!r} matches no program; name one of {', '.join(sorted(programs))}"
                )
            found.update(matches)
        elif pattern in programs:
            found.add(pattern)
        else:
            raise ManifestError(
                f"{display}: {where}: unknown program {pattern!r}{did_you_mean(pattern, programs)}; "
                f"declare it as [{dotted(('programs', pattern))}] or name one of {', '.join(sorted(programs))}"
            )
    return tuple(sorted(found))


def _resolve_bundle(display: str, name: str, spec: BundleSpec, programs: tuple[str, ...], manifest: Manifest) -> BundlePlan:
    where = dotted(("bundles", name))
    _check_name(display, where, name, ".tar.gz")
    archive = spec.output if spec.output is not None else f"{name}.tar.gz"
    if spec.output is not None:
        suffix = next((s for s in ARCHIVE_SUFFIXES if spec.output.lower().endswith(s)), None)
        if suffix is None:
            raise ManifestError(
                f"{display}: {where}.output: {spec.output!r} is not an archive name; name it NAME.tar.gz, NAME.tgz or NAME.zip"
            )
        _check_name(display, f"{where}.output", spec.output[: -len(suffix)], suffix)
    for index, pattern in enumerate(spec.include):
        problem = glob_problem(pattern)
        if problem:
            raise ManifestError(f"{display}: {where}.include[{index}]: {pattern!r} {problem}; "
                                "name files inside it (relative paths without '..')")
    etrecords = tuple(f"{p}.etrecord" for p in programs if spec.etrecord or manifest.programs[p].etrecord)
    return BundlePlan(name=name, programs=programs, archive=archive, include=tuple(spec.include), etrecords=etrecords)


def _check_bundle_collisions(display: str, bundles: tuple[BundlePlan, ...]) -> None:
    """Two bundles whose archives are one file (equal names, or names equal but for case)."""
    owners: dict[str, BundlePlan] = {}
    for bundle in bundles:
        key = case_key(bundle.archive)
        other = owners.get(key)
        if other is not None:
            what = (
                f"both write {bundle.archive!r}" if other.archive == bundle.archive
                else f"write {other.archive!r} and {bundle.archive!r}, one file on macOS and Windows"
            )
            raise DataNameError(f"{display}: bundles.{other.name} and bundles.{bundle.name} {what}; give one an output of its own")
        owners[key] = bundle
