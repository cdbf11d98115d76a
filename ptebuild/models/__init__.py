"""Model kinds: how a manifest's model is made, lowered and checked. One module each, registered here.

A model table names its kind (``[models.chat] kind = "executorch-llm"``; without ``kind`` it is a
``"factory"`` model, a Python callable). A kind module defines ``KIND``, a
:class:`ptebuild.models.base.ModelKind` (or a subclass): it declares its manifest table (a
pydantic model, for validation and ``ptebuild schema``), resolves a table into the plan's values
(methods, the files its key hashes, the files its programs write besides the ``.pte``), the
options its programs take for each backend, the backends it cannot be lowered for and why, and
implements the worker's side: build (lower and check) a program, and run one
(:mod:`ptebuild.models.base` documents each hook). A new kind is one module (or package) and one
line in :data:`MODEL_KIND_MODULES`; nothing else names a kind.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# Manifest ``kind`` -> its module (named in full: the import closure of an action key's code
# follows these names as imports, :mod:`ptebuild.import_closure`).
MODEL_KIND_MODULES = {
    "factory": "ptebuild.models.factory",
    "executorch-llm": "ptebuild.models.executorch_llm",
    "executorch-multimodal": "ptebuild.models.multimodal",
}
DEFAULT_KIND = "factory"
"""The kind of a model table that does not name one."""

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ptebuild.models.base import ModelKind
    from ptebuild.plan import ProgramPlan


def get_model_kind(name: str) -> ModelKind:
    """Return the ``KIND`` object of the model kind called ``name`` (KeyError if unknown)."""
    module = importlib.import_module(kind_module(name))
    kind: ModelKind = module.KIND
    return kind


def kind_module(name: str) -> str:
    """The dotted name of the module of the model kind called ``name`` (KeyError if unknown)."""
    return MODEL_KIND_MODULES[name]


def model_kind_names() -> list[str]:
    """The registered model kinds' names, in registration order."""
    return list(MODEL_KIND_MODULES)


def options_model_of(program: ProgramPlan) -> type[BaseModel] | None:
    """The model that validates ``program``'s options: its model kind's for its backend (an LLM
    program's), or None for the backend's own (what :func:`ptebuild.backends.bind_plan` takes)."""
    return get_model_kind(program.kind).program_options_model(program.backend)
