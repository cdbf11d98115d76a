"""Cross-check a validated manifest and resolve it into a :class:`BuildPlan`.

Checks what pydantic cannot see alone: references between tables (a program's model and
methods, a shape's dynamic dims), backend options, output names and their collisions, and that
each factory module exists. Nothing here imports torch or the model code.
"""

from __future__ import annotations

from pathlib import Path

from ptebuild.backends import get_backend
from ptebuild.errors import DataNameError, ManifestError
from ptebuild.manifest.locations import describe_validation_error, dotted
from ptebuild.manifest.modules import find_module_file, module_search_path
from ptebuild.manifest.schema import Manifest, ModelSpec, ProgramSpec
from ptebuild.manifest.typos import did_you_mean
from ptebuild.names import case_key, name_problem
from ptebuild.plan import (
    BuildPlan,
    DimPlan,
    InputPlan,
    MethodPlan,
    ProgramPlan,
    ShimPlan,
)
from ptebuild.runtime.record import RECORD_NAME


def _check_name(display: str, where: str, name: str, extension: str) -> None:
    problem = name_problem(name, extension=extension)
    if problem:
        raise DataNameError(f"{display}: {where}: name {name!r} {problem}")


def _resolve_methods(display: str, model_name: str, model: ModelSpec) -> dict[str, MethodPlan]:
    methods = {}
    for method_name, method in model.methods.items():
        dims = {**model.dims, **method.dims}
        used = set()
        for index, spec in enumerate(method.inputs):
            for dim in spec.shape:
                if isinstance(dim, str):
                    if dim not in dims:
                        where = f"models.{model_name}.methods.{method_name}.inputs[{index}].shape"
                        hint = did_you_mean(dim, dims) or (
                            f"; declare it under models.{model_name}.dims" if not dims else ""
                        )
                        raise ManifestError(f"{display}: {where}: unknown dynamic dim {dim!r}{hint}")
                    used.add(dim)
        methods[method_name] = MethodPlan(
            name=method_name,
            function=method.function or method_name,
            inputs=tuple(
                InputPlan(name=i.name, shape=tuple(i.shape), dtype=i.dtype, low=i.low, high=i.high)
                for i in method.inputs
            ),
            dims=tuple(
                DimPlan(name=n, min=d.min, max=d.max, example=d.example_size())
                for n, d in sorted(dims.items())
                if n in used
            ),
        )
    return methods


def _resolve_program(
    display: str, manifest: Manifest, name: str, program: ProgramSpec, model_methods: dict
) -> ProgramPlan:

    where = dotted(("programs", name))
    _check_name(display, where, name, ".pte")
    if program.model not in manifest.models:
        raise ManifestError(
            f"{display}: {where}.model: unknown model {program.model!r}"
            f"{did_you_mean(program.model, manifest.models)}; declare it as [models.{program.model}]"
        )
    model = manifest.models[program.model]
    backend_name = program.backend or manifest.defaults.backend
    if backend_name is None:
        raise ManifestError(
            f"{display}: {where}.backend: missing; set backend here or in [defaults]"
        )
    backend = get_backend(backend_name)
    methods = model_methods[program.model]
    # A program's methods are a set: sorted, so that reordering the manifest changes nothing.
    chosen = sorted(program.methods) if program.methods is not None else sorted(methods)
    if not chosen:
        raise ManifestError(f"{display}: {where}.methods: empty; list at least one method or leave it out")
    for method in chosen:
        if method not in methods:
            raise ManifestError(
                f"{display}: {where}.methods: model {program.model!r} has no method {method!r}"
                f"{did_you_mean(method, methods)}"
            )
    if len(set(chosen)) != len(chosen):
        raise ManifestError(f"{display}: {where}.methods: lists a method twice")
    options = _resolve_options(display, manifest, name, program, backend_name, backend)
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
    min_cosine = check.min_cosine if check.min_cosine is not None else defaults.min_cosine
    program_entry = program.model_dump(mode="json")
    program_entry.pop("compile_specs", None)  # merged into options, which the key hashes
    program_entry.update(
        backend=backend_name,
        methods=chosen,
        options=options.model_dump(mode="json"),
    )
    return ProgramPlan(
        name=name,
        model=program.model,
        backend=backend_name,
        factory=model.factory,
        kwargs=dict(model.kwargs),
        weights=model.weights,
        seed=model.seed,
        sources=tuple(model.sources),
        methods=tuple(methods[m] for m in chosen),
        data_name=program.data_name,
        options=options.model_dump(mode="json"),
        atol=atol if atol is not None else backend.check_defaults(options).atol,
        min_cosine=min_cosine if min_cosine is not None else backend.check_defaults(options).min_cosine,
        check_enabled=check.enabled and defaults.enabled,
        model_entry=model.model_dump(mode="json"),
        program_entry=program_entry,
    )


def _resolve_options(display: str, manifest: Manifest, name: str, program: ProgramSpec, backend_name: str, backend):
    """Validate a program's ``options`` and ``compile_specs`` (over the defaults') with the backend's model.

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
    merged: dict = {}
    for _, table in tables:
        merged.update(table)
    try:
        options = backend.options_model.model_validate(merged)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]["loc"]
        prefix = ("programs", name, "compile_specs" if program.compile_specs else "options")
        if first:
            for where, table in reversed(tables):
                if first[0] in table:
                    prefix = where
                    break
        raise ManifestError(describe_validation_error(exc, display, backend.options_model, prefix=prefix)) from None
    shim = getattr(options, "shim_library", None)
    if shim is not None:
        at = dotted(("programs", name, "compile_specs", "shim_library"))
        if shim not in manifest.shims:
            raise ManifestError(
                f"{display}: {at}: no shim target {shim!r}{did_you_mean(shim, manifest.shims)}; "
                f"declare it as [shims.{shim}]"
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
                    what = f"both write {file_name!r}"
                else:
                    what = (
                        f"write {other_name!r} and {file_name!r}, one file on macOS and Windows; "
                        "choose names that differ in more than case"
                    )
                raise DataNameError(f"{display}: {other_owner} and {owner} {what}")
            owners[key] = (file_name, owner)


def resolve(manifest: Manifest, *, display: str, manifest_dir: Path) -> BuildPlan:
    search_path = module_search_path(manifest_dir)
    model_methods = {}
    for model_name, model in manifest.models.items():
        module = model.factory.split(":", 1)[0]
        if find_module_file(module, search_path) is None:
            users = sorted(p for p, spec in manifest.programs.items() if spec.model == model_name)
            for_whom = f" (used by program {users[0]!r})" if users else ""
            raise ManifestError(
                f"{display}: models.{model_name}.factory: cannot import {module!r}{for_whom}: "
                f"no module named {module!r} in {manifest_dir} or the environment"
            )
        model_methods[model_name] = _resolve_methods(display, model_name, model)
    programs = tuple(
        _resolve_program(display, manifest, name, spec, model_methods)
        for name, spec in manifest.programs.items()
    )
    shims = []
    for name, spec in manifest.shims.items():
        _check_name(display, dotted(("shims", name)), name, ".lib")
        if not (manifest_dir / spec.source).is_file():
            raise ManifestError(f"{display}: shims.{name}.source: no such file {spec.source!r}")
        shims.append(ShimPlan(name=name, source=spec.source, format=spec.format, keep_order=spec.keep_order))
    plan = BuildPlan(
        manifest=display,
        manifest_dir=str(manifest_dir),
        out=manifest.defaults.out,
        programs=programs,
        shims=tuple(shims),
    )
    check_collisions(display, plan)
    return plan
