"""The CUDA backend's options: its compile specs, their defaults, and what ExecuTorch is passed.

Compile specs (``compile_specs = {...}`` on a program, ``compile_specs.cuda = {...}`` in
``[defaults]``; validated by :class:`CudaOptions` when the manifest is loaded):

- ``platform``: ``"linux"`` (default) or ``"windows"`` (cross-compiled with MinGW-w64, linked
  against ``shim_library``, a ``[shims.*]`` target of the manifest that must be called
  ``aoti_cuda_shims``: AOTInductor links that library name; the link folder and the Windows
  check are in :mod:`ptebuild.backends.cuda.windows`);
- ``low_memory_mode``, ``max_autotune``, ``emulate_precision_casts``, ``triton_kernel_mode``:
  booleans, passed to ExecuTorch as ``ON``/``OFF`` (defaults: off, off, on, on).

``max_autotune`` is off by default, unlike ExecuTorch: kernels chosen without timing, so that
the ``.pte`` is byte-reproducible (:mod:`ptebuild.backends.cuda.inductor`).
"""

from __future__ import annotations

import functools
from typing import Literal

from ptebuild.backends.cuda.windows import SHIM_LIBRARY_NAME

# The defaults of the specs ptebuild exposes: ExecuTorch's, except max_autotune (reproducible
# kernels; see ptebuild.backends.cuda.inductor).
DEFAULTS = {
    "platform": "linux",
    "shim_library": None,
    "low_memory_mode": False,
    "max_autotune": False,
    "emulate_precision_casts": True,
    "triton_kernel_mode": True,
}


def compile_specs(options) -> dict[str, str]:
    """ExecuTorch's compile-spec keys and values (without the method name and the shim path).

    ``options``: the validated model, or the plain dict a build plan carries.
    """
    def get(key):
        if isinstance(options, dict):
            return options.get(key, DEFAULTS[key])
        return getattr(options, key)

    specs = {"platform": get("platform")}
    for key in ("low_memory_mode", "max_autotune", "emulate_precision_casts", "triton_kernel_mode"):
        specs[key] = "ON" if get(key) else "OFF"
    return specs


def platform_of(options) -> str | None:
    """The ``platform`` spec of the validated model or plain dict ``options`` (None if not set)."""
    return options.get("platform") if isinstance(options, dict) else getattr(options, "platform", None)


@functools.cache
def options_model() -> type:
    """The CUDA backend's compile specs as a pydantic model (defined on first use: pydantic is not
    imported by the builder's cheap hooks)."""
    from pydantic import ConfigDict, model_validator

    from ptebuild.backends.base import BackendOptions

    class CudaOptions(BackendOptions):
        """The CUDA backend's compile specs."""

        # The schema says as much as the validator below where JSON Schema can (editors warn).
        model_config = ConfigDict(**BackendOptions.model_config, json_schema_extra={
            "if": {"properties": {"platform": {"const": "windows"}}, "required": ["platform"]},
            "then": {"required": ["shim_library"], "properties": {"shim_library": {"const": SHIM_LIBRARY_NAME}}},
            "else": {"not": {"required": ["shim_library"]}},
        })

        platform: Literal["linux", "windows"] = "linux"
        """Where the program runs: ``linux``, or ``windows`` (cross-compiled with MinGW-w64)."""
        shim_library: str | None = None
        """Windows: the ``[shims.*]`` target (``aoti_cuda_shims``) whose import library is linked."""
        low_memory_mode: bool = False
        """Keep mutated buffers' compile-time clones on the CPU (large models on small GPUs)."""
        max_autotune: bool = False
        """Let Inductor time kernel variants and keep the fastest (faster program, slower
        lowering, and the ``.pte`` is no longer byte-reproducible); off: chosen without timing."""
        emulate_precision_casts: bool = True
        """Round like eager PyTorch where low-precision values are cast."""
        triton_kernel_mode: bool = True
        """Replace some operators (SDPA, ...) by ExecuTorch's Triton kernels."""

        @model_validator(mode="after")
        def _shims_for_windows(self):
            if self.platform == "windows" and self.shim_library is None:
                raise ValueError(
                    f"platform 'windows' needs shim_library = \"{SHIM_LIBRARY_NAME}\", a [shims.*] target of this manifest"
                )
            if self.platform == "linux" and self.shim_library is not None:
                raise ValueError("shim_library is only for platform = 'windows'; remove it")
            return self

        def compile_specs(self) -> dict[str, str]:
            return compile_specs(self)

    return CudaOptions
