"""Backends: one module each, registered here by name.

A backend module defines a ``BACKEND`` object with:

- ``name``: the manifest spelling (``backend = "xnnpack"``);
- ``Options``: a frozen pydantic model of its ``options`` table (validated when the manifest is
  loaded, before anything is imported from torch);
- ``keeps_data_in_pte``: True for a backend that cannot write a ``.ptd`` (it refuses ``data_name``);
- ``default_check`` and ``check_defaults(options)``: the tolerances a program is checked against
  eager PyTorch with;
- ``prepare(exported_program, data_name, options, export, calibration)``: a hook run on each
  method's exported program before lowering (returns the program to lower): quantization,
  tagging weights for the ``.ptd``;
- ``partitioners(options)``: the partitioners handed to ``to_edge_transform_and_lower``.

Only ``prepare`` and ``partitioners`` may import torch or executorch, and only inside the
function: loading the registry stays cheap. ``cuda`` (:mod:`.cuda`) is one such module;
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
