"""Backends: one module each, registered here by name.

A backend module defines a ``BACKEND`` object, a :class:`ptebuild.backends.base.Backend` (or a
subclass overriding some of its hooks): ``name`` (the manifest spelling, ``backend = "xnnpack"``),
``options_factory`` (a frozen pydantic model of its options or compile specs, validated when the
manifest is loaded, before anything is imported from torch), ``keeps_data_in_pte`` (True for a
backend that cannot write a ``.ptd``), its check tolerances, and the hooks documented in
:mod:`ptebuild.backends.base`: cheap ones the builder calls (key facts, can this machine build or
run it) and worker ones (``prepare``, ``partitioners``, ``lowering_context``, ``emit_config``,
``data_files``, ``rewrite_keys``, ``check``).

Only the worker hooks may import torch or executorch, and only inside the function: loading the
registry stays cheap. ``cuda`` (:mod:`.cuda`) is one such module;
``coreml`` or ``vulkan`` slot in as one more module and one more line in :data:`BACKEND_MODULES`.
"""

from __future__ import annotations

import importlib
from typing import Literal, get_args

# Manifest name -> module under ptebuild.backends.
BACKEND_MODULES = {
    "portable": "portable",
    "xnnpack": "xnnpack",
    "cuda": "cuda",
}

BackendName = Literal["portable", "xnnpack", "cuda"]
assert set(get_args(BackendName)) == set(BACKEND_MODULES)


def get_backend(name: str):
    """Return the ``BACKEND`` object of the backend called ``name`` (KeyError if unknown)."""
    module = importlib.import_module(f"ptebuild.backends.{BACKEND_MODULES[name]}")
    return module.BACKEND
