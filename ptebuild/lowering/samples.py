"""A method's samples: real inputs, declared in the manifest (``models.M.methods.F.samples``).

A samples spec is one string:

- a file, relative to the manifest's folder: ``torch.save`` of one tuple of inputs (the method's
  inputs in order, each as the method declares it: a tensor, a scalar, a tuple, list or dict of
  inputs), or of a list of such tuples;
- a folder, relative to the manifest's folder: every ``*.pt`` and ``*.pth`` file in it (not in its
  subfolders), in name order, each as a file above;
- a factory ``"package.module:callable"``, imported as a model's factory is (the manifest's
  folder first on ``sys.path``), called without arguments, returning a tuple or a list of tuples.

A method with one input may give a bare tensor for a tuple of one. Files are read with
``torch.load(weights_only=True)``: nothing in a samples file runs code.

The files' SHA-256 (a factory's module's code) are inputs of the program's key
(:mod:`ptebuild.builder.keys`): a sample that changes rebuilds the program. Samples calibrate
static quantization instead of generated inputs (:func:`ptebuild.models.factory.lower.calibration_inputs`),
run in the check beside the generated inputs, and are test cases of the program's ``.bpte``.

:func:`check_samples` holds each sample to the method's declared inputs, and a sample that does
not fit is a manifest error located at ``models.M.methods.F.samples`` (exit 2), naming the sample,
the input and what it is against what is declared.

The module imports torch only inside :func:`load_samples` and :func:`check_samples`:
:func:`sample_files` runs in the builder.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ptebuild.errors import ManifestError
from ptebuild.plan import InputPlan, MethodPlan, ProgramPlan

FACTORY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_.]*")
SUFFIXES = (".pt", ".pth")
"""The files of a samples folder."""

Sample = tuple[Any, ...]
"""One sample: the method's inputs, in order (what ``getattr(model, function)(*sample)`` takes)."""


def is_factory(spec: str) -> bool:
    return FACTORY.fullmatch(spec) is not None


def where(model: str, method: MethodPlan) -> str:
    """``models.M.methods.F.samples``: where a samples problem is located."""
    return f"models.{model}.methods.{method.name}.samples"


def sample_files(spec: str, manifest_dir: Path) -> dict[str, Path] | str:
    """The files of a file or folder spec: name (relative to the manifest's folder, ``/``) -> path;
    or what is wrong (one clause). A factory has no files (its code is its module's)."""
    path = Path(manifest_dir, spec)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and p.is_file() and not p.name.startswith("."))
        if not files:
            return f"folder {spec!r} holds no {' or '.join('*' + s for s in SUFFIXES)} file"
        return {_name(p, manifest_dir): p for p in files}
    if path.is_file():
        return {_name(path, manifest_dir): path}
    return f"no such file or folder {spec!r}"


def _name(path: Path, manifest_dir: Path) -> str:
    try:
        return path.relative_to(manifest_dir).as_posix()
    except ValueError:
        return path.as_posix()


def load_samples(model: str, method: MethodPlan, manifest_dir: Path, display: str) -> list[Sample]:
    """The method's samples, checked against its declared inputs (:func:`check_samples`).

    Raises ManifestError (located at the samples entry) when they cannot be read or do not fit.
    """
    import torch

    spec = method.samples
    assert spec is not None
    at = where(model, method)
    if is_factory(spec):
        factory = _import_factory(spec, manifest_dir, display, at)
        try:
            value = factory()
        except Exception as exc:  # the user's code may raise anything
            raise ManifestError(f"samples factory {spec!r} failed: {type(exc).__name__}: {exc}; fix the factory "
                                "(it is called without arguments)", manifest=display, location=at) from exc
        samples = _as_samples(value, f"samples factory {spec!r}", display, at)
    else:
        files = sample_files(spec, manifest_dir)
        if isinstance(files, str):
            raise ManifestError(f"{files}; give a file or folder relative to the manifest", manifest=display, location=at)
        samples = []
        for name, path in files.items():
            try:
                value = torch.load(path, map_location="cpu", weights_only=True)
            except Exception as exc:
                raise ManifestError(
                    f"cannot read {name!r} as samples (torch.load, weights_only): {type(exc).__name__}: {exc}; "
                    "save tuples of tensors with torch.save, or give a factory 'package.module:callable'",
                    manifest=display, location=at,
                ) from exc
            samples += _as_samples(value, f"file {name!r}", display, at)
    if not samples:
        raise ManifestError(f"{spec!r} holds no sample; give at least one tuple of inputs", manifest=display, location=at)
    check_samples(samples, method, display, at)
    return samples


def load_program_samples(program: ProgramPlan, manifest_dir: Path, display: str) -> dict[str, list[Sample]]:
    """Method name -> its samples, for each method of ``program`` that declares some."""
    return {m.name: load_samples(program.model, m, manifest_dir, display) for m in program.methods if m.samples}


def _import_factory(spec: str, manifest_dir: Path, display: str, at: str) -> Any:
    """Import ``package.module:callable`` as a model's factory is (the manifest's folder first)."""
    import importlib
    import sys

    module_name, attribute = spec.split(":", 1)
    if str(manifest_dir) not in sys.path:
        sys.path.insert(0, str(manifest_dir))
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # the user's code may raise anything while importing
        raise ManifestError(f"cannot import samples factory {spec!r}: {type(exc).__name__}: {exc}; fix the module, "
                            "or put it beside the manifest", manifest=display, location=at) from exc
    for part in attribute.split("."):
        if not hasattr(target, part):
            import difflib

            names = sorted(n for n in dir(target) if not n.startswith("_") and callable(getattr(target, n, None)))
            hint = difflib.get_close_matches(part, names, n=1)
            raise ManifestError(f"module {module_name!r} has no attribute {attribute!r}"
                                f"{f' (did you mean {hint[0]!r}?)' if hint else ''}; name a callable that returns the "
                                f"samples ({module_name}:NAME)", manifest=display, location=at) from None
        target = getattr(target, part)
    if not callable(target):
        raise ManifestError(f"samples factory {spec!r} is not callable; name a function that returns the samples",
                            manifest=display, location=at)
    return target


def _as_samples(value: Any, what: str, display: str, at: str) -> list[Sample]:
    """A tuple (one sample), a list of tuples, or a bare tensor (one sample of one input)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [(value,)]
    if isinstance(value, tuple):
        return [value]
    if isinstance(value, list) and all(isinstance(item, (tuple, torch.Tensor)) for item in value):
        return [item if isinstance(item, tuple) else (item,) for item in value]
    raise ManifestError(
        f"{what} holds a {type(value).__name__}, not a tuple of inputs or a list of such tuples; give a tuple of "
        "the method's inputs, or a list of such tuples",
        manifest=display, location=at,
    )


def check_samples(samples: list[Sample], method: MethodPlan, display: str, at: str) -> None:
    """Each sample fits the method's declared inputs: structure, dtype, fixed dims, dynamic dims
    within their ranges and the same across inputs, scalars equal to their declared values.

    Raises ManifestError: ``sample 3: input 'image' (inputs[0]): shape (1, 3, 32, 32), declared
    ['batch', 3, 64, 64] (dim 2 is 32, declared 64)``.
    """
    for index, sample in enumerate(samples):
        problem = _sample_problem(sample, method)
        if problem:
            raise ManifestError(f"sample {index}: {problem}; give samples that fit the method's declared inputs",
                                manifest=display, location=at)


def _sample_problem(sample: Sample, method: MethodPlan) -> str | None:
    declared = method.inputs
    if len(sample) != len(declared):
        names = ", ".join(repr(spec.name) for spec in declared)
        return f"{len(sample)} inputs, the method declares {len(declared)} ({names})"
    sizes: dict[str, tuple[int, str]] = {}
    ranges = {dim.name: dim for dim in method.dims}
    for index, (spec, value) in enumerate(zip(declared, sample)):
        for label, leaf_spec, leaf in _leaves(spec, value, f"input {spec.name!r} (inputs[{index}])"):
            problem = _leaf_problem(leaf_spec, leaf, label, sizes, ranges)
            if problem:
                return problem
    return None


def _leaves(spec: InputPlan, value: Any, label: str) -> Iterator[tuple[str, InputPlan, Any]]:
    """(label, spec, value) of each leaf; a container that does not match yields itself as a leaf
    with the container's spec (its problem is then named)."""
    if spec.kind == "dict":
        if not isinstance(value, dict) or set(value) != {item.name for item in spec.items}:
            yield label, spec, value
            return
        for item in spec.items:
            yield from _leaves(item, value[item.name], f"{label}[{item.name!r}]")
        return
    if spec.kind in ("tuple", "list"):
        if not isinstance(value, (tuple, list)) or len(value) != len(spec.items):
            yield label, spec, value
            return
        for i, (item, part) in enumerate(zip(spec.items, value)):
            yield from _leaves(item, part, f"{label}[{i}]")
        return
    yield label, spec, value


def _leaf_problem(spec: InputPlan, value: Any, label: str, sizes: dict[str, tuple[int, str]], ranges: dict[str, Any]) -> str | None:
    import torch

    if spec.kind in ("dict", "tuple", "list"):
        if spec.kind == "dict":
            keys = sorted(item.name for item in spec.items)
            got = f"keys {sorted(value)}" if isinstance(value, dict) else f"a {type(value).__name__}"
            return f"{label}: {got}, declared a dict with keys {keys}"
        got = f"{len(value)} items" if isinstance(value, (tuple, list)) else f"a {type(value).__name__}"
        return f"{label}: {got}, declared a {spec.kind} of {len(spec.items)}"
    if spec.kind == "scalar":
        if isinstance(value, torch.Tensor) or value != spec.value:
            return f"{label}: {value!r}, declared the scalar {spec.value!r} (the program is exported for that value)"
        return None
    if not isinstance(value, torch.Tensor):
        return f"{label}: a {type(value).__name__}, declared a {spec.dtype} tensor of shape {list(spec.shape)}"
    dtype = str(value.dtype).removeprefix("torch.")
    if dtype != spec.dtype:
        return f"{label}: dtype {dtype}, declared {spec.dtype}"
    shape = tuple(value.shape)
    if len(shape) != len(spec.shape):
        return f"{label}: shape {shape}, declared {list(spec.shape)} ({len(shape)} dims, declared {len(spec.shape)})"
    for axis, (size, want) in enumerate(zip(shape, spec.shape)):
        if isinstance(want, int):
            if size != want:
                return f"{label}: shape {shape}, declared {list(spec.shape)} (dim {axis} is {size}, declared {want})"
            continue
        dim = ranges.get(want)
        if dim is not None and not dim.min <= size <= dim.max:
            return (f"{label}: shape {shape}, declared {list(spec.shape)} ({want} is {size}, outside its range "
                    f"{dim.min}..{dim.max})")
        if dim is not None and size % dim.multiple_of:
            return (f"{label}: shape {shape}, declared {list(spec.shape)} ({want} is {size}, not a multiple of its "
                    f"multiple_of {dim.multiple_of})")
        seen = sizes.setdefault(want, (size, label))
        if seen[0] != size:
            return f"{label}: {want} is {size}, and {seen[0]} in {seen[1]}: one sample has one size per dim"
    return None


def sizes_of(sample: Sample, method: MethodPlan) -> dict[str, int]:
    """The dynamic dims' sizes of a (checked) sample."""
    found: dict[str, int] = {}
    for spec, value in zip(method.inputs, sample):
        for _, leaf_spec, leaf in _leaves(spec, value, ""):
            if leaf_spec.kind == "tensor":
                for size, want in zip(tuple(leaf.shape), leaf_spec.shape):
                    if isinstance(want, str):
                        found[want] = int(size)
    return found
