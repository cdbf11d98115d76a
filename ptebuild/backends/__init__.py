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
from typing import TYPE_CHECKING, Literal

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
    from ptebuild.backends.base import Backend

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
