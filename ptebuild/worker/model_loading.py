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
from ptebuild.plan import ProgramPlan
from ptebuild.worker.checkpoints import load_state_dict

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
            f"of model {program.model!r}: {type(exc).__name__}: {exc}",
            manifest=display,
            location=f"programs.{program.name}",
        ) from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ManifestError(
                f"module {module_name!r} has no attribute "
                f"{attribute!r} (factory of model {program.model!r})",
                manifest=display,
                location=f"programs.{program.name}",
            ) from None
    if not callable(target):
        raise ManifestError(
            f"factory {program.factory!r} is not callable", manifest=display, location=f"programs.{program.name}"
        )
    return target


def build_model(program: ProgramPlan, manifest_dir: Path, display: str) -> torch.nn.Module:
    """Return the model in eval mode, seeded, with its weights loaded."""
    import torch

    factory = import_factory(program, manifest_dir, display)
    torch.manual_seed(program.seed)
    try:
        model = factory(**program.kwargs)
    except Exception as exc:
        raise BuildError(
            f"factory {program.factory!r} failed: {type(exc).__name__}: {exc}",
            manifest=display,
            location=f"programs.{program.name}",
        ) from exc
    if not isinstance(model, torch.nn.Module):
        raise BuildError(
            f"factory {program.factory!r} returned {type(model).__name__}, not a torch.nn.Module",
            manifest=display,
            location=f"programs.{program.name}",
        )
    if program.weights:
        path = manifest_dir / program.weights
        try:
            state = load_state_dict(path, program.weights_key, manifest=display, model=program.model, weights=program.weights)
        except ManifestError:
            raise
        except FileNotFoundError:
            raise ManifestError(
                f"no such file {program.weights!r}", manifest=display, location=f"models.{program.model}.weights"
            ) from None
        except Exception as exc:
            raise BuildError(
                f"cannot load {program.weights!r} as a state dict: {exc}",
                manifest=display,
                location=f"models.{program.model}.weights",
            ) from exc
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()
            detail = " ".join(line.strip() for line in first[:3])
            raise BuildError(
                f"{program.weights!r} does not fit the model: {detail}",
                manifest=display,
                location=f"models.{program.model}.weights",
            ) from exc
    return model.eval()
