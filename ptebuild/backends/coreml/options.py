"""The Core ML backend's compile specs: their names, defaults, and what ExecuTorch is passed.

Compile specs (``compile_specs = {...}`` on a program, ``compile_specs.coreml = {...}`` in
``[defaults]``; validated by the model of :func:`options_model` when the manifest is loaded),
each the keyword of ExecuTorch's ``CoreMLBackend.generate_compile_specs`` it feeds:

- ``compute_units``: ``all`` (default), ``cpu_only``, ``cpu_and_gpu``, ``cpu_and_ne`` (the
  Neural Engine): where the device runs the model (the model's bytes do not change);
- ``minimum_deployment_target``: ``iOS16`` (default) ... ``iOS26``, ``macOS13`` ... ``macOS26``,
  ``tvOS16`` ... ``tvOS26``: the oldest OS the model loads on (Core ML specification 7..10; the
  macOS and tvOS names alias the iOS ones). ExecuTorch's Core ML delegate needs iOS 16 / macOS 13,
  so older targets are refused; upstream's default (none: coremltools picks the lowest target
  the operators allow) is replaced by iOS16, so a model's specification never moves with a
  coremltools upgrade;
- ``compute_precision``: ``float16`` (default, what the Neural Engine runs) or ``float32``;
- ``model_type``: ``model`` (default: an ``.mlpackage``, compiled by the device on first load) or
  ``compiled_model`` (an ``.mlmodelc``, which coremltools compiles through macOS's Core ML
  framework only: refused on other machines by ``can_build``);
- ``multimethod_weight_sharing``: ``positional`` or ``disabled``, for programs of several
  methods: ``positional`` combines the methods into one multifunction model stored once (a
  weight the methods share is stored once), which needs Core ML specification 9, so a target of
  iOS18 / macOS15 or later; default: ``positional`` from those targets, else ``disabled`` (each
  method its own model). ``positional`` with an older target is refused: the model would not
  load on the target it names;
- ``lower_full_graph`` (default false): fail the lowering if Core ML cannot take every operator;
- ``skip_operators``: edge operator names (``aten.convolution.default``) left to ExecuTorch's
  portable kernels.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

COMPUTE_UNITS = ("all", "cpu_only", "cpu_and_gpu", "cpu_and_ne")
PRECISIONS = ("float16", "float32")
MODEL_TYPES = ("model", "compiled_model")
SPECIFICATION_OF_TARGET = {
    **{f"iOS{v}": s for v, s in ((16, 7), (17, 8), (18, 9), (26, 10))},
    **{f"macOS{v}": s for v, s in ((13, 7), (14, 8), (15, 9), (26, 10))},
    **{f"tvOS{v}": s for v, s in ((16, 7), (17, 8), (18, 9), (26, 10))},
}
"""Deployment target -> the Core ML specification version it loads (coremltools' ``ct.target``)."""
TOO_OLD = {
    **{f"iOS{v}": "iOS16" for v in (13, 14, 15)},
    **{f"macOS{v}": "macOS13" for v in ("10_15", "11", "12")},
    **{f"tvOS{v}": "tvOS16" for v in (13, 14, 15)},
}
"""coremltools' targets that ExecuTorch's Core ML delegate does not run on -> the oldest it does."""
MULTIFUNCTION_SPECIFICATION = 9
"""Multifunction models (several methods in one) need Core ML specification 9 (iOS18, macOS15)."""

Target = Literal[
    "iOS16", "iOS17", "iOS18", "iOS26", "macOS13", "macOS14", "macOS15", "macOS26", "tvOS16", "tvOS17", "tvOS18", "tvOS26"
]
DEFAULT_TARGET: Target = "iOS16"


def get(options: Any, key: str, default: Any = None) -> Any:
    """``key`` of the validated model or the plain dict a build plan carries."""
    if options is None:
        return default
    return options.get(key, default) if isinstance(options, dict) else getattr(options, key, default)


def default_sharing(target: str) -> str:
    return "positional" if SPECIFICATION_OF_TARGET[target] >= MULTIFUNCTION_SPECIFICATION else "disabled"


@functools.cache
def options_model() -> type:
    """The Core ML backend's compile specs as a pydantic model (defined on first use)."""
    from pydantic import ConfigDict, model_validator

    from ptebuild.backends.options import BackendOptions

    multifunction: list[Any] = sorted(t for t, spec in SPECIFICATION_OF_TARGET.items() if spec >= MULTIFUNCTION_SPECIFICATION)
    schema_extra: dict[str, Any] = {"allOf": [
        {"if": {"properties": {"multimethod_weight_sharing": {"const": "positional"}}, "required": ["multimethod_weight_sharing"]},
         "then": {"required": ["minimum_deployment_target"], "properties": {"minimum_deployment_target": {"enum": multifunction}}}},
        {"if": {"properties": {"lower_full_graph": {"const": True}}, "required": ["lower_full_graph"]},
         "then": {"properties": {"skip_operators": {"maxItems": 0}}}},
    ]}

    class CoreMLOptions(BackendOptions):
        """The Core ML backend's compile specs (ExecuTorch's ``CoreMLBackend.generate_compile_specs``)."""

        # The schema says as much as the validators below where JSON Schema can (editors warn).
        model_config = ConfigDict(**BackendOptions.model_config, json_schema_extra=schema_extra)

        compute_units: Literal["all", "cpu_only", "cpu_and_gpu", "cpu_and_ne"] = "all"
        """Where the device runs the model: ``all``, ``cpu_only``, ``cpu_and_gpu`` or ``cpu_and_ne``
        (CPU and Neural Engine). Chosen at load time on the device: the model's bytes do not change."""
        minimum_deployment_target: Target = DEFAULT_TARGET
        """The oldest OS the model loads on (``iOS16``... ``iOS26``, ``macOS13``..., ``tvOS16``...):
        it sets the Core ML specification version (7 for iOS16, 9 for iOS18)."""
        compute_precision: Literal["float16", "float32"] = "float16"
        """The precision of the model's arithmetic and weights; ``float16`` is what the Neural
        Engine runs (inputs and outputs keep their dtypes: Core ML casts at the boundary)."""
        model_type: Literal["model", "compiled_model"] = "model"
        """``model``: an ``.mlpackage``, compiled on the device on first load; ``compiled_model``: an
        ``.mlmodelc``, which coremltools builds only through macOS's Core ML framework."""
        multimethod_weight_sharing: Literal["positional", "disabled"] | None = None
        """Several methods: ``positional`` makes one multifunction model (Core ML specification 9:
        iOS18/macOS15 or later), ``disabled`` one model per method; default by the target."""
        lower_full_graph: bool = False
        """Fail the lowering unless Core ML takes every operator of every method."""
        skip_operators: tuple[str, ...] = ()
        """Edge operators (``aten.convolution.default``) left to ExecuTorch's portable kernels."""

        @model_validator(mode="before")
        @classmethod
        def _sharing_default(cls, data):
            target = data.get("minimum_deployment_target") if isinstance(data, dict) else None
            if isinstance(target, str) and target in TOO_OLD:
                raise ValueError(
                    f"minimum_deployment_target {target!r}: ExecuTorch's Core ML delegate runs on iOS 16, macOS 13 "
                    f"and tvOS 16 or later; use {TOO_OLD[target]!r} or newer"
                )
            if isinstance(data, dict) and data.get("multimethod_weight_sharing") is None:
                target = data.get("minimum_deployment_target", DEFAULT_TARGET)
                # Any TOML value may be here (a list, a table): the field's own validation names it.
                if isinstance(target, str) and target in SPECIFICATION_OF_TARGET:
                    data = {**data, "multimethod_weight_sharing": default_sharing(target)}
            return data

        @model_validator(mode="after")
        def _sharing_needs_multifunction(self):
            target = self.minimum_deployment_target
            if self.multimethod_weight_sharing == "positional" and SPECIFICATION_OF_TARGET[target] < MULTIFUNCTION_SPECIFICATION:
                raise ValueError(
                    f"multimethod_weight_sharing 'positional' makes one multifunction model (Core ML specification "
                    f"{MULTIFUNCTION_SPECIFICATION}), which does not load on minimum_deployment_target {target!r}: "
                    f"raise the target to iOS18, macOS15 or tvOS18, or use 'disabled'"
                )
            if self.skip_operators and self.lower_full_graph:
                raise ValueError("skip_operators leaves operators out of Core ML, which lower_full_graph = true forbids; keep one")
            return self

    return CoreMLOptions
