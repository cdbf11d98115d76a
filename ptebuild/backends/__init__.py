"""Backends: one module each, registered here by name.

A backend module defines a ``BACKEND`` object, a :class:`ptebuild.backends.base.Backend` (or a
subclass overriding some of its hooks). It declares what it is (:mod:`.base`): its manifest name
(``backend = "xnnpack"``), its options model (a frozen pydantic model of its options and compile
specs, validated when the manifest is loaded, before anything is imported from torch; the
manifest's JSON Schema shows it per backend), where its weights live, whether it needs a GPU,
which check its programs pass and whether their bytes are reproducible; and it implements the
hooks documented there: cheap ones the builder calls (key facts, can this machine build or check
it) and worker ones (``prepare``, ``partitioners``, ``lowering_context``, ``emit_config``,
``data_files``, ``rewrite_keys``, ``check``).

Only the worker hooks may import torch or executorch, and only inside the function: loading the
registry stays cheap. A new backend is one module (or package) and one line in
:data:`BACKEND_MODULES`; nothing else names a backend.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Literal

# Manifest name -> module under ptebuild.backends.
BACKEND_MODULES = {
    "portable": "portable",
    "xnnpack": "xnnpack",
    "cuda": "cuda",
    "openvino": "openvino",
    "coreml": "coreml",
    "vulkan": "vulkan",
}

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ptebuild.backends.base import Backend
    from ptebuild.plan import BuildPlan, ProgramPlan

    BackendName = str
else:
    BackendName = Literal[tuple(BACKEND_MODULES)]
    """The manifest's ``backend`` values (a ``Literal`` of the registry's names, for the schema)."""


def get_backend(name: str) -> Backend:
    """Return the ``BACKEND`` object of the backend called ``name`` (KeyError if unknown)."""
    module = importlib.import_module(f"ptebuild.backends.{BACKEND_MODULES[name]}")
    backend: Backend = module.BACKEND
    return backend


def backend_names() -> list[str]:
    """The registered backends' names, in registration order."""
    return list(BACKEND_MODULES)


class Binding:
    """A program's backend, resolved once: the registry's object and the program's options typed.

    ``source`` is the options' JSON form (what keys hash and tasks carry), ``options`` the
    backend's options model validated from it: given by the manifest's resolution (validated
    there, never again), else validated on first use only, once per binding. The builder's cheap
    hooks take ``source``; a worker's hooks take ``options``.
    """

    def __init__(self, name: str, source: Mapping[str, Any], options: Any = None) -> None:
        self.name = name
        self.backend = get_backend(name)
        self.source = source
        self._options = options

    @property
    def options(self) -> Any:
        """The options typed (an instance of the backend's options model)."""
        if self._options is None:
            self._options = self.backend.options_model.model_validate(dict(self.source))
        return self._options


def binding(program: ProgramPlan) -> Binding:
    """The backend of ``program`` and its typed options: the plan's own binding (made once when
    it was resolved or read back), or, for a program whose backend or options were replaced since,
    a new one."""
    bound = program.bound
    if isinstance(bound, Binding) and bound.name == program.backend and bound.source is program.options:
        return bound
    return Binding(program.backend, program.options)


def bind(plan: BuildPlan) -> BuildPlan:
    """``plan`` with each program bound to its backend (:class:`Binding`): for a plan read back
    from JSON, whose programs then validate their options once, when first used typed."""
    from dataclasses import replace

    programs = tuple(replace(p, bound=Binding(p.backend, p.options)) for p in plan.programs)
    return replace(plan, programs=programs)


def bind_program(program: ProgramPlan) -> ProgramPlan:
    """One program bound to its backend (a task's, read back from JSON)."""
    from dataclasses import replace

    return replace(program, bound=Binding(program.backend, program.options))
