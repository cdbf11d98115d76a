"""Build a manifest's model: import its factory, seed, call it, load its weights.

Runs in a worker: imports torch and the model's code.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ptebuild.errors import BuildError, ManifestError
from ptebuild.models.factory.checkpoints import load_state_dict, prefix_hint
from ptebuild.plan import ProgramPlan
from ptebuild.typos import did_you_mean

if TYPE_CHECKING:
    import torch


def import_factory(program: ProgramPlan, manifest_dir: Path, display: str) -> Callable[..., object]:
    module_name, attribute = program.factory.split(":", 1)
    if str(manifest_dir) not in sys.path:
        sys.path.insert(0, str(manifest_dir))
    try:
        target = importlib.import_module(module_name)
    except Exception as exc:  # the model's own code may raise anything while importing
        raise ManifestError(
            f"cannot import factory {program.factory!r} "
            f"of model {program.model!r}: {type(exc).__name__}: {exc}; fix the module, or put it beside the manifest",
            manifest=display,
            location=f"programs.{program.name}",
        ) from exc
    where = f"models.{program.model}.factory"
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            callables = [n for n in dir(target) if not n.startswith("_") and callable(getattr(target, n, None))]
            raise ManifestError(
                f"module {module_name!r} has no attribute {attribute!r}{did_you_mean(part, callables)}; "
                f"name a callable that returns the model ({module_name}:NAME)",
                manifest=display,
                location=where,
            ) from None
    if not callable(target):
        raise ManifestError(
            f"factory {program.factory!r} is not callable ({type(target).__name__}); name a function or class that returns the model",
            manifest=display, location=where,
        )
    return target


def _kwargs_problem(factory: Callable[..., object], kwargs: dict[str, object]) -> str | None:
    """Why the manifest's ``kwargs`` cannot be passed to ``factory`` (an unknown or missing
    argument, with a did-you-mean), or None when they bind (or the signature cannot be read)."""
    import inspect

    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(**kwargs)
    except TypeError as exc:
        known = [n for n, p in signature.parameters.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        unknown = next((k for k in kwargs if k not in signature.parameters), None)
        hint = did_you_mean(unknown, known) if unknown is not None and known else ""
        return f"{exc}{hint}; give only kwargs the factory takes ({', '.join(known) or 'it takes none'})"
    return None


def build_model(program: ProgramPlan, manifest_dir: Path, display: str) -> torch.nn.Module:
    """Return the model in eval mode, seeded, with its weights loaded."""
    import torch

    factory = import_factory(program, manifest_dir, display)
    torch.manual_seed(program.seed)
    problem = _kwargs_problem(factory, program.kwargs)
    if problem is not None:
        raise ManifestError(f"factory {program.factory!r}: {problem}", manifest=display, location=f"models.{program.model}.kwargs")
    try:
        model = factory(**program.kwargs)
    except Exception as exc:
        raise BuildError(
            f"factory {program.factory!r} failed: {type(exc).__name__}: {exc}; fix the factory (it is called with "
            f"models.{program.model}.kwargs)",
            manifest=display,
            location=f"programs.{program.name}",
        ) from exc
    if not isinstance(model, torch.nn.Module):
        raise BuildError(
            f"factory {program.factory!r} returned {type(model).__name__}, not a torch.nn.Module; return the model "
            "from it",
            manifest=display,
            location=f"programs.{program.name}",
        )
    if program.weights:
        path = manifest_dir / program.weights
        try:
            state = load_state_dict(path, program.weights_key, manifest=display, model=program.model, weights=program.weights,
                                    weights_prefix=program.weights_prefix)
        except ManifestError:
            raise
        except FileNotFoundError:
            raise ManifestError(
                f"no such file {program.weights!r}; give the weights file's path relative to the manifest", manifest=display,
                location=f"models.{program.model}.weights"
            ) from None
        except Exception as exc:
            raise BuildError(
                f"cannot load {program.weights!r} as a state dict: {exc}; give a state dict saved with torch.save, a "
                "checkpoint with weights_key, or a .safetensors file",
                manifest=display,
                location=f"models.{program.model}.weights",
            ) from exc
        misfit = _state_misfit(model, state)
        if misfit is not None:
            detail, fix = misfit
            raise ManifestError(
                f"{program.weights!r} does not fit the model: Error(s) in loading state_dict for {type(model).__name__}: {detail}; "
                f"{fix}",
                manifest=display,
                location=f"models.{program.model}.weights",
            )
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()
            detail = " ".join(line.strip() for line in first[:3])
            raise BuildError(
                f"{program.weights!r} does not fit the model: {detail}; give the weights of this model (its class and "
                "kwargs)",
                manifest=display,
                location=f"models.{program.model}.weights",
            ) from exc
    return model.eval()


_OTHER_WEIGHTS = "give the weights of this model (its class and kwargs), saved with torch.save(model.state_dict())"


def _state_misfit(model: torch.nn.Module, state: object) -> tuple[str, str] | None:
    """What keeps ``state`` from loading into ``model`` (strictly): the first missing, unexpected and
    misshapen keys with their counts, and the fix (a prefix to strip, where every unexpected key
    has one that the model's names lack); None when it fits (``load_state_dict`` then decides)."""
    import torch

    if not isinstance(state, dict):
        return f"the file holds a {type(state).__name__}, not a state dict", _OTHER_WEIGHTS
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    misshapen = [
        k for k in own
        if k in state and isinstance(state[k], torch.Tensor) and tuple(state[k].shape) != tuple(own[k].shape)
    ]
    parts = []
    for what, keys in (("missing", missing), ("unexpected", unexpected)):
        if keys:
            more = f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""
            parts.append(f"{what} key {keys[0]!r}{more}")
    if misshapen:
        key = misshapen[0]
        more = f" (and {len(misshapen) - 1} more)" if len(misshapen) > 1 else ""
        parts.append(f"size mismatch for {key!r}: {list(state[key].shape)} in the file, {list(own[key].shape)} in the model{more}")
    if not parts:
        return None
    shapes = {k: tuple(v.shape) for k, v in state.items() if isinstance(v, torch.Tensor)}
    hint = prefix_hint({k: tuple(v.shape) for k, v in own.items()}, shapes)
    return ", ".join(parts), hint or _OTHER_WEIGHTS
