"""Action keys: one digest over everything that can change a program's bytes, and nothing else.

A key hashes (xxh3-128) the canonical JSON of the program's *inputs*:

- ``manifest.model`` and ``manifest.program``: the normalised manifest entries (defaults
  applied, keys sorted), so reformatting the TOML or reordering its keys changes nothing;
- ``source:<name>``: the SHA-256 of each source file: the factory's module and every ``.py``
  of the top-level package it lives in, plus the model's ``sources`` globs; named relative to
  the manifest's folder (or to the ``sys.path`` entry a module was found in), never absolutely;
- ``weights:<name>``: the SHA-256 of the weights file;
- ``samples:<name>``: the SHA-256 of each file of a method's samples (a file, or every sample
  file of a folder); a samples factory's code is ``source:`` inputs as a model's is;
- ``toolchain.*``: Python, torch, executorch and ptebuild versions, the platform, and the
  digest of ptebuild's own lowering code; for a backend of an installed plug-in, its
  distribution and version (``backend-plugin``) and a digest of its code (``backend-code``);
- ``workaround:<name>``: each fix of a known fault of the toolchain the backend applies to the
  program (:meth:`~ptebuild.backends.base.Backend.workarounds`).

The same breakdown is kept in the action record, so ``--explain`` can name what changed. The
input names are typed in :mod:`ptebuild.keyinputs`, the one module that parses or writes them.
File digests come from the store's stat cache: an unchanged file costs a ``stat``, no read.
Nothing here imports torch or executorch.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

from ptebuild import backend_registry, keyinputs, own_code
from ptebuild.backends import bound_backend
from ptebuild.backends import entries as backend_entries
from ptebuild.canonical import canonical_json
from ptebuild.errors import ManifestError
from ptebuild.lowering import samples
from ptebuild.manifest.modules import find_module_file, module_search_path
from ptebuild.path_problems import describe, file_problem
from ptebuild.plan import BuildPlan, ProgramPlan, ShimPlan

KEY_SCHEMA = "ptebuild-action-key 1"

DigestFile = Callable[[Path], tuple[str, int]]
"""(path) -> (sha256 hex, size): the store's stat-cached digest, or a plain hash without a store."""

WORKER_ENTRY = "ptebuild.worker.execute"
"""The module every executor's worker runs a task through (:func:`ptebuild.worker.execute.execute`):
the code that lowers, checks and counts a program is its import closure with the program's model
kind's and backend's modules (:func:`code_entries`)."""


def code_entries(program: ProgramPlan) -> tuple[str, ...]:
    """The entry modules of the code that makes ``program``'s bytes and figures: the worker's, its
    model kind's and (one of ptebuild's own) its backend's. Their import closure, read from the
    source (:func:`ptebuild.own_code.closure_digest`), is the ``toolchain.ptebuild-code`` input:
    every module any of them can run, found without a list kept by hand. A plug-in backend's code
    is its own input (``toolchain.backend-code``)."""
    from ptebuild.models import kind_module

    entries = [WORKER_ENTRY, kind_module(program.kind)]
    entry = backend_entries().get(program.backend)
    if entry is not None and not entry.plugin:
        entries.append(entry.target.partition(":")[0])
    return tuple(entries)


def digest_text(text: str) -> str:
    import xxhash

    return xxhash.xxh3_128_hexdigest(text.encode())


_toolchain_cache: dict[str, str] | None = None


def toolchain_facts(digest_file: DigestFile) -> dict[str, str]:
    """Versions and platform facts that change lowering, read without importing torch."""
    global _toolchain_cache
    if _toolchain_cache is None:
        from ptebuild._version import __version__
        from ptebuild.distributions import installed_versions

        # Versions from the dist-info folder names: importlib.metadata costs more than a no-op build.
        versions = installed_versions()

        def version(dist: str) -> str:
            return versions.get(dist, "not installed")

        _toolchain_cache = {
            keyinputs.toolchain("python"): f"{sys.implementation.name} {platform.python_version()}",
            keyinputs.toolchain("torch"): version("torch"),
            keyinputs.toolchain("executorch"): version("executorch"),
            keyinputs.toolchain("ptebuild"): __version__,
            keyinputs.toolchain("platform"): f"{sys.platform}-{platform.machine()}",
        }
    return dict(_toolchain_cache)


def _flatten_entry(prefix: str, value: object, out: dict[str, str]) -> None:
    """Flatten a manifest entry into dotted fields, so that --explain can name the changed one."""
    if isinstance(value, dict) and value:
        for key in sorted(value):
            _flatten_entry(f"{prefix}.{key}", value[key], out)
    else:
        out[keyinputs.manifest(prefix)] = canonical_json(value)


def model_sources(program: ProgramPlan, manifest_dir: Path, display: str) -> dict[str, Path]:
    """The files of a model's code and of what its kind reads (an LLM's params JSON and tokenizer):
    name (relative, '/'-separated) -> path."""
    sources: dict[str, Path] = {}
    if program.factory:
        sources.update(module_sources(program.factory.split(":", 1)[0], manifest_dir, f"{display}: models.{program.model}.factory"))
    for _, name in program.model_files:
        sources[Path(name).as_posix()] = manifest_dir / name
    for index, pattern in enumerate(program.sources):  # each a relative glob inside the folder (resolve.py)
        matches = sorted(p for p in manifest_dir.glob(pattern) if p.is_file())
        if not matches:
            raise ManifestError(f"{display}: models.{program.model}.sources[{index}]: {pattern!r} matches no file; "
                                "give globs of files relative to the manifest")
        for path in matches:
            sources[path.relative_to(manifest_dir).as_posix()] = path
    return sources


def module_sources(module: str, manifest_dir: Path, where: str) -> dict[str, Path]:
    """The files of a factory module's code: every ``.py`` of its top-level package (or the module
    alone); ManifestError at ``where`` if there is no such module."""
    module_file = find_module_file(module, module_search_path(manifest_dir))
    if module_file is None:
        raise ManifestError(f"{where}: no module named {module!r}; put it beside the manifest or install it")
    sources: dict[str, Path] = {}
    found = _top_level(module, manifest_dir, module_file)
    if found is not None:
        base, package_dir = found
        files = [package_dir.with_suffix(".py")] if not package_dir.is_dir() else sorted(package_dir.rglob("*.py"))
        for path in files:
            if "__pycache__" not in path.parts:
                sources[path.relative_to(base).as_posix()] = path
    if not sources:  # a namespace package or a lone module
        sources[module_file.name] = module_file
    return sources


def sample_inputs(program: ProgramPlan, manifest_dir: Path, display: str, digest_file: DigestFile) -> dict[str, str]:
    """The key inputs of the program's methods' samples: each file's SHA-256 (``samples:<name>``),
    a factory's module's code (``source:<name>``). ManifestError at the samples entry if a file
    or folder is missing or empty."""
    inputs: dict[str, str] = {}
    for method in program.methods:
        if method.samples is None:
            continue
        where = f"{display}: {samples.where(program.model, method)}"
        if samples.is_factory(method.samples):
            for name, path in module_sources(method.samples.split(":", 1)[0], manifest_dir, where).items():
                inputs[keyinputs.source(name)] = digest_file(path)[0]
            continue
        files = samples.sample_files(method.samples, manifest_dir)
        if isinstance(files, str):
            raise ManifestError(f"{where}: {files}; give a file or folder of torch.save'd input tuples, relative to "
                                "the manifest, or a factory 'package.module:callable'")
        for name, path in files.items():
            inputs[keyinputs.samples(name)] = _digest_input(path, name, where, "give a torch.save'd tuple of inputs", digest_file)
    return inputs


def _top_level(module: str, manifest_dir: Path, module_file: Path) -> tuple[Path, Path] | None:
    """(the search path entry, the package folder or module less ``.py``) of the top-level
    package (or module) ``module`` is imported from; None for a namespace package."""
    top = module.split(".", 1)[0]
    for entry in module_search_path(manifest_dir):
        package_dir = Path(entry or ".", top)
        if (package_dir / "__init__.py").is_file() or package_dir.with_suffix(".py") == module_file:
            return Path(entry or "."), package_dir
    return None


def source_folders(program: ProgramPlan, manifest_dir: Path) -> set[str]:
    """The folders whose listings decide which files :func:`model_sources` finds, beyond the
    folders of the files it found (a file added there changes the key): every folder of the
    model's top-level package (its sources are all its ``*.py``, at any depth) and every folder
    a ``sources`` pattern looks into. For the no-op stamp (:mod:`ptebuild.builder.noop`)."""
    folders: set[str] = set()
    module = program.factory.split(":", 1)[0]
    module_file = find_module_file(module, module_search_path(manifest_dir)) if program.factory else None
    found = _top_level(module, manifest_dir, module_file) if module_file is not None else None
    if found is not None and found[1].is_dir():
        for root, dirs, _ in os.walk(found[1]):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            folders.add(root)
    for pattern in program.sources:
        parts = Path(pattern).parts
        for depth in range(1, len(parts)):  # the folders that each leading part of the pattern matches
            folders.update(str(p) for p in manifest_dir.glob("/".join(parts[:depth])) if p.is_dir())
    return folders


def program_inputs(
    program: ProgramPlan, plan: BuildPlan, digest_file: DigestFile, memo: own_code.Memo | None = None
) -> dict[str, str]:
    """The breakdown of everything ``program``'s bytes depend on: input name -> digest or value,
    with its backend's own toolchain facts (CUDA, Triton, GPU arch...). ``memo`` (the cache front
    end) keeps the import closure of ptebuild's code between builds, and what each digest of it
    covered, for ``--explain``."""
    manifest_dir = Path(plan.manifest_dir)
    inputs = manifest_inputs(program)
    for name, path in model_sources(program, manifest_dir, plan.manifest).items():
        field = next((f for f, file in program.model_files if Path(file).as_posix() == name), None)
        if field is None:
            inputs[keyinputs.source(name)] = digest_file(path)[0]
        else:  # a file the manifest names: one located line if it cannot be read
            at = f"programs.{program.name}.{field}" if field.startswith("options.") else f"models.{program.model}.{field}"
            inputs[keyinputs.source(name)] = _digest_input(
                path, name, f"{plan.manifest}: {at}", f"give the {field.rsplit('.', 1)[-1]} file", digest_file
            )
    if program.weights:
        where = f"{plan.manifest}: models.{program.model}.weights"
        inputs[keyinputs.weights(program.weights)] = _digest_input(
            manifest_dir / program.weights, program.weights, where, "give the path of a torch.save state dict", digest_file
        )
    inputs.update(sample_inputs(program, manifest_dir, plan.manifest, digest_file))
    inputs.update(toolchain_facts(digest_file))
    # ptebuild's own code that shapes the bytes: an edit to it rebuilds, even without a version bump
    inputs[keyinputs.toolchain("ptebuild-code")] = own_code.closure_digest(code_entries(program), digest_file, memo, explained=True)
    backend = bound_backend(program).backend
    for name, value in backend.toolchain_facts(program.options).items():
        inputs[keyinputs.toolchain(name)] = str(value)
    for name in backend.workarounds(program.options, program):
        inputs[keyinputs.workaround(name)] = "applied"
    for name, value in backend_registry.plugin_facts(backend_entries().get(program.backend), digest_file).items():
        inputs[keyinputs.toolchain(name)] = value  # a plug-in backend's own code and version
    return inputs


def manifest_inputs(program: ProgramPlan) -> dict[str, str]:
    """The part of :func:`program_inputs` the manifest alone decides (its normalised entries)."""
    inputs: dict[str, str] = {"schema": KEY_SCHEMA}
    _flatten_entry("model", program.model_entry, inputs)
    _flatten_entry("program", program.program_entry, inputs)
    return inputs


SHIMS_ENTRY = "ptebuild.shims"
"""The import-library writer's module (``load_shim_list``, ``write_import_library``)."""


def shim_inputs(shim: ShimPlan, plan: BuildPlan, digest_file: DigestFile) -> dict[str, str]:
    inputs = {
        "schema": KEY_SCHEMA,
        keyinputs.shims("format"): shim.format,
        keyinputs.shims("keep_order"): canonical_json(shim.keep_order),
        keyinputs.source(shim.source): _digest_input(
            Path(plan.manifest_dir, shim.source), shim.source, f"{plan.manifest}: shims.{shim.name}.source",
            "give a .def or shim-list file", digest_file,
        ),
    }
    facts = toolchain_facts(digest_file)
    inputs[keyinputs.toolchain("ptebuild")] = facts[keyinputs.toolchain("ptebuild")]
    inputs[keyinputs.toolchain("shims-code")] = own_code.closure_digest([SHIMS_ENTRY], digest_file)
    return inputs


def _digest_input(path: Path, name: str, where: str, fix: str, digest_file: DigestFile) -> str:
    """The SHA-256 of a file the manifest names; ManifestError (one located line) if it cannot be read."""
    problem = file_problem(path)
    if problem is None:
        try:
            return digest_file(path)[0]
        except OSError as exc:  # it changed between the look and the read
            problem = exc.strerror or str(exc)
    raise ManifestError(f"{where}: {describe(name, problem)}; {fix}")


def action_key(inputs: dict[str, str]) -> str:
    return digest_text(canonical_json(inputs))


ELSEWHERE_SCHEMA = "ptebuild-built-elsewhere 1"
_SAME_EVERYWHERE = (keyinputs.toolchain("ptebuild"), keyinputs.toolchain("ptebuild-code"),
                    keyinputs.toolchain("backend-plugin"), keyinputs.toolchain("backend-code"))


def elsewhere_key(inputs: dict[str, str]) -> str:
    """A key over the inputs without this machine's toolchain: what a machine that cannot build
    a program (a CUDA program on a CPU runner) looks it up by, to restore what a machine that
    can built. The manifest entries, sources, weights and ptebuild's own code must still match."""
    kept = keyinputs.without(inputs, [keyinputs.InputKind.TOOLCHAIN], keep=_SAME_EVERYWHERE)
    kept["schema"] = ELSEWHERE_SCHEMA
    return action_key(kept)


def explain_changes(
    old: dict[str, str] | None, new: dict[str, str], model: str = "", program: str = "", memo: own_code.Memo | None = None
) -> list[str]:
    """Name what changed between two input breakdowns (``model`` and ``program`` name the entries);
    a change of ptebuild's own code names its files where ``memo`` knows both digests' breakdowns."""
    if old is None:
        return ["never built with this cache"]
    changes = []
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        line = keyinputs.describe_change(name, before, after, model=model, program=program)
        if keyinputs.InputName.parse(name).is_digest and before is not None and after is not None:
            files = own_code.changed_files(before, after, memo) if name.endswith("-code") else None
            if files:
                shown = ", ".join(f"ptebuild/{f}" for f in files[:5])
                line += f": {shown}" + (f" and {len(files) - 5} more" if len(files) > 5 else "")
        changes.append(line)
    return changes or ["inputs unchanged, but the cached outputs could not be restored"]
