"""Backends: one module (or package) each, found by name through the backend registry.

A backend module defines a ``BACKEND`` object, a :class:`ptebuild.backends.base.Backend` (or a
subclass overriding some of its hooks). It declares what it is (:mod:`.base`): its manifest name
(``backend = "xnnpack"``), its options model (a frozen pydantic model of its options and compile
specs, validated when the manifest is loaded, before anything is imported from torch; the
manifest's JSON Schema shows it per backend), where its weights live, whether it needs a GPU,
which check its programs pass, whether their bytes are reproducible, and the readers of its
delegates' payloads (:mod:`ptebuild.runtime.payloads`); and it implements the hooks documented
there: cheap ones the builder calls (key facts, can this machine build or check it) and worker
ones (``prepare``, ``partitioners``, ``lowering_context``, ``emit_config``, ``data_files``,
``rewrite_keys``, ``check``).

Only the worker hooks may import torch or executorch, and only inside the function: loading the
registry stays cheap. ptebuild's own backends are one module (or package) here and one line in
:data:`BUILTIN_BACKENDS`; a separately installed distribution adds one
through the ``ptebuild.backends`` entry-point group (:mod:`ptebuild.backend_registry`). Nothing
else names a backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ptebuild import backend_registry

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ptebuild.backends.base import Backend
    from ptebuild.plan import BuildPlan, ProgramPlan

    BackendName = str


def __getattr__(name: str) -> Any:
    """``BackendName``: the manifest's ``backend`` values, a ``Literal`` of the registry's names
    (for the schema), made when first asked for: plug-ins are looked up then, not at import."""
    if name == "BackendName":
        from typing import Literal

        return Literal[tuple(backend_names())]
    raise AttributeError(f"module 'ptebuild.backends' has no attribute {name!r}")


BUILTIN_BACKENDS = {
    "portable": "ptebuild.backends.portable",
    "xnnpack": "ptebuild.backends.xnnpack",
    "cuda": "ptebuild.backends.cuda",
    "openvino": "ptebuild.backends.openvino",
    "coreml": "ptebuild.backends.coreml",
    "vulkan": "ptebuild.backends.vulkan",
}
"""ptebuild's own backends: manifest name -> the module whose ``BACKEND`` it is, in the order
they are listed (``ptebuild doctor``, ``ptebuild schema``, the manifest's error lines)."""


def entries() -> dict[str, backend_registry.BackendEntry]:
    """Manifest name -> :class:`~ptebuild.backend_registry.BackendEntry`: ptebuild's own first (in
    :data:`BUILTIN_BACKENDS`' order), then the installed plug-ins by name."""
    return backend_registry.registry(BUILTIN_BACKENDS).entries


def registry_problems() -> tuple[str, ...]:
    """One line for each installed plug-in that is left out (a name taken, not a name)."""
    return backend_registry.registry(BUILTIN_BACKENDS).problems


def get_backend(name: str) -> Backend:
    """Return the ``BACKEND`` object of the backend called ``name``.

    Raises KeyError if no backend has that name, PluginError (one line naming its distribution)
    for an installed plug-in that cannot be loaded or whose object is not a backend of that name.
    """
    from ptebuild.backends.base import Backend

    entry = entries()[name]
    backend = backend_registry.load(entry)
    if entry.plugin and not (isinstance(backend, Backend) and backend.name == name):
        what = f"a Backend named {backend.name!r}" if isinstance(backend, Backend) else f"a {type(backend).__name__}"
        raise backend_registry.refuse(entry, f"{entry.target} is {what}, not a ptebuild.backends.base.Backend "
                                             f"named {name!r}")
    found: Backend = backend
    return found


def backend_names() -> list[str]:
    """The registered backends' names: ptebuild's own in registration order, then installed plug-ins."""
    return list(entries())


def is_plugin(name: str) -> bool:
    """True if ``name`` is a backend of another installed distribution."""
    entry = entries().get(name)
    return entry is not None and entry.plugin


def plugin_problems() -> list[str]:
    """One line for each installed plug-in that is left out or cannot be loaded (loads them all)."""
    from ptebuild.errors import PluginError

    lines = list(registry_problems())
    for name in backend_names():
        if is_plugin(name):
            try:
                get_backend(name)
            except PluginError as exc:
                lines.append(str(exc))
    return lines


class BoundBackend:
    """A program's backend, resolved once: the registry's object and the program's options typed.

    ``source`` is the options' JSON form (what keys hash and tasks carry), ``options`` the
    backend's options model validated from it: given by the manifest's resolution (validated
    there, never again), else validated on first use only, once per binding. The builder's cheap
    hooks take ``source``; a worker's hooks take ``options``.
    """

    def __init__(self, name: str, source: Mapping[str, Any], options: Any = None,
                 options_model: Callable[[], Any] | None = None) -> None:
        self.name = name
        self.backend = get_backend(name)
        self.source = source
        self._options = options
        self._options_model = options_model
        """What validates ``source``, asked for when first needed: the model a model kind gives its
        programs (an LLM program's: :meth:`ptebuild.models.base.ModelKind.program_options_model`),
        None for the backend's own options model."""

    @property
    def options(self) -> Any:
        """The options typed (an instance of the backend's options model, or the model kind's)."""
        if self._options is None:
            model = self._options_model() if self._options_model is not None else None
            self._options = (model or self.backend.options_model).model_validate(dict(self.source))
        return self._options


def bound_backend(program: ProgramPlan) -> BoundBackend:
    """The backend of ``program`` and its typed options: the plan's own binding (made once when
    it was resolved or read back), or, for a program whose backend or options were replaced since,
    a new one."""
    bound = program.bound
    if isinstance(bound, BoundBackend) and bound.name == program.backend and bound.source is program.options:
        return bound
    return BoundBackend(program.backend, program.options)


def bind_plan(plan: BuildPlan, options_model: Callable[[ProgramPlan], Any] | None = None) -> BuildPlan:
    """``plan`` with each program bound to its backend (:class:`BoundBackend`): for a plan read back
    from JSON, whose programs then validate their options once, when first used typed, by
    ``options_model(program)`` (:func:`ptebuild.models.options_model_of`: the model kind's, else the
    backend's)."""
    from dataclasses import replace

    programs = tuple(bind_program(p, options_model) for p in plan.programs)
    return replace(plan, programs=programs)


def bind_program(program: ProgramPlan, options_model: Callable[[ProgramPlan], Any] | None = None) -> ProgramPlan:
    """One program bound to its backend (a task's, read back from JSON); ``options_model`` as :func:`bind_plan`'s."""
    from dataclasses import replace

    model = (lambda: options_model(program)) if options_model is not None else None  # asked only where typed
    return replace(program, bound=BoundBackend(program.backend, program.options, options_model=model))


__all__ = ["BoundBackend", "backend_names", "bind_plan", "bind_program", "bound_backend", "get_backend", "is_plugin", "plugin_problems"]
