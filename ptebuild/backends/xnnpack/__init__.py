"""The XNNPACK backend: CPU delegate for float and quantized operators.

Quantization (``options.quantize``):

- ``int8-dynamic`` and ``int8`` use ExecuTorch's XNNPACKQuantizer through PT2E: the method is
  prepared, calibrated on inputs generated from the model's seed (the example sizes and the
  dynamic dims' extremes, several draws each), converted and exported again;
- ``8da4w`` (8-bit dynamic activations, 4-bit weights in groups of ``group_size`` input
  features) uses torchao's ``quantize_`` with ``Int8DynamicActivationIntxWeightConfig``, as
  ExecuTorch's LLM export does, on a copy of the eager model before export
  (:meth:`XnnpackBackend.transform_model`: ``quantize_`` swaps ``nn.Linear`` weights, which an
  exported graph no longer has). The program is then lowered by ``to_edge_transform_and_lower``
  (which keeps ``aten.linear`` for XNNPACK's int4 kernels); ``to_edge(...).to_backend(...)``
  lowers the same graph to a delegate that runs, silently wrong (seen: max error 7.4e4 on
  outputs near 0.5), and is never used for these programs.

With a data name, the delegate's own constants (keyed by SHA-256 in the named data store) are
tagged for the external ``.ptd`` through ExecuTorch's delegate constant tagging: the tag is set
on the unlifted graph's ``get_attr`` nodes, and the program is exported again so that the tag
reaches the lowered program. Constants XNNPACK's own passes make later (a BatchNorm folded into
the convolution before it) carry no tag; :meth:`XnnpackBackend.place_weights` moves them into
the ``.ptd`` after emitting.
"""

from __future__ import annotations

import copy
import functools
import weakref
from dataclasses import dataclass
from typing import Literal

from ptebuild.backends.base import EXECUTORCH_RUNTIME, Backend, CheckKind, CheckTolerances
from ptebuild.backends.xnnpack.linear_use import example_probe, linears_used_elsewhere
from ptebuild.runtime.payload_readers.xnnpack import READERS as PAYLOAD_READERS


@functools.cache
def options_model() -> type:
    from typing import Annotated

    from pydantic import ConfigDict, Field, field_validator, model_validator

    from ptebuild.backends.options import BackendOptions

    class XnnpackOptions(BackendOptions):
        # The schema says as much as the validators below where JSON Schema can (editors warn).
        model_config = ConfigDict(**BackendOptions.model_config, json_schema_extra={
            "if": {"not": {"properties": {"quantize": {"const": "8da4w"}}, "required": ["quantize"]}},
            "then": {"not": {"anyOf": [{"required": [key]} for key in ("group_size", "skip_ungroupable", "min_float_cosine")]}},
        })

        per_op_mode: bool = False
        """Delegate each operator on its own instead of the largest partitions (slower, for debugging)."""
        quantize: Literal["none", "int8-dynamic", "int8", "8da4w"] = "none"
        """``int8-dynamic``: int8 per-channel weights, activations quantized at run time;
        ``int8``: int8 weights and activations, calibrated on generated inputs; ``8da4w``: int4
        weights in groups of ``group_size`` input features (torchao), int8 activations
        quantized at run time (linear layers only; the rest stays float)."""
        group_size: Annotated[int, Field(ge=1, json_schema_extra={"multipleOf": GROUP_MULTIPLE})] | None = None
        """``8da4w``: input features per group of 4-bit weights sharing one scale, a multiple of
        32 (XNNPACK's int4 kernels) that divides every linear's input features; default 32."""
        skip_ungroupable: bool = False
        """``8da4w``: keep in float the linears whose input features ``group_size`` does not
        divide (default: refuse the program, naming the first such linear)."""
        min_float_cosine: Annotated[float, Field(ge=-1, le=1)] | None = None
        """``8da4w``: the least cosine similarity of each output with the float model's (default
        0.95); the check's ``atol``/``min_cosine`` apply against torchao's quantized eager model."""

        @field_validator("group_size")
        @classmethod
        def _xnnpack_groups(cls, value: int | None) -> int | None:
            if value is not None and value % GROUP_MULTIPLE:
                raise ValueError(
                    f"{value} is not a multiple of {GROUP_MULTIPLE}: XNNPACK's 4-bit kernels take groups of "
                    "32, 64, 96... input features; choose one that divides the linears' input features"
                )
            return value

        @model_validator(mode="after")
        def _only_for_8da4w(self):
            if self.quantize != "8da4w":
                for key in ("group_size", "skip_ungroupable", "min_float_cosine"):
                    if getattr(self, key) not in (None, False):
                        raise ValueError(f"{key} is only for quantize = '8da4w' (quantize is {self.quantize!r}); remove it")
            return self

    return XnnpackOptions


GROUP_MULTIPLE = 32
"""XNNPACK's blockwise int4 kernels take groups of a multiple of 32 input features (ExecuTorch
1.5.1 ``backends/xnnpack/operators/node_visitor.py``, ``_check_per_channel_group_params``)."""
DEFAULT_GROUP_SIZE = 32
DEFAULT_MIN_FLOAT_COSINE = 0.95


QUANTIZED_CHECK = {
    "int8-dynamic": CheckTolerances(atol=0.1, rtol=0.05, min_cosine=0.995),
    "int8": CheckTolerances(atol=0.5, rtol=0.1, min_cosine=0.97),
}
"""Int8 steps scale with the values they quantize: ``rtol`` (of each output's magnitude, see
:mod:`ptebuild.tolerances`) lets a classifier whose scores reach 100 through 50 layers pass as one
whose scores stay near 1 does (a torchvision-like resnet50, random weights, static int8: max error
3.7 on scores up to 249, 0.057 of their mean magnitude; its resnet18 sibling 0.057 on scores up to 3.4)."""
EIGHT_DA_FOUR_W_CHECK = CheckTolerances(atol=5e-2, rtol=1e-2, min_cosine=0.9999)
"""8da4w against torchao's quantized eager model (see :meth:`XnnpackBackend.check_defaults`)."""


QS8_MEAN = "xnnpack-qs8-mean-outside-delegate"
QS8_MEAN_WHY = (
    "mean.dim (global average pooling) runs in ExecuTorch's portable kernels, not in the XNNPACK delegate: XNNPACK's "
    "quantized mean keeps its int32 accumulators in a workspace that grows with the batch, and its runtime does not "
    "plan memory again when only that workspace grows (src/subgraph/static-reduce.c reshape_reduce_operator returns "
    "no xnn_status_reallocation_required for it, unlike convolution and fully-connected), so a larger batch after a "
    "smaller one on the same loaded program writes past its planned memory and answers wrongly"
)
"""The fix applied to statically quantized XNNPACK programs with dynamic dims (:meth:`XnnpackBackend.
workarounds`). Seen on a CNN+MLP policy, batch 1..4, static int8: batch 4 after batch 1 answered
0.18 from eager PyTorch, 0.0046 when run first; with the mean outside the delegate 0.0046 in
every order. A float mean passes no workspace to XNNPACK and is not affected."""


TORCHAO_REFERENCE = CheckKind("executorch-runtime-vs-torchao-eager")
"""8da4w: every method run in ExecuTorch's runtime, against torchao's quantized eager model (and
the float model's direction, ``min_float_cosine``)."""


@dataclass(frozen=True)
class XnnpackBackend(Backend):
    def check_defaults(self, options) -> CheckTolerances:
        """The tolerances of a program with these options.

        Float programs: XNNPACK's float kernels (other summation orders, fused activations) stay
        within 1e-3 of eager PyTorch. PT2E int8 programs compare with the float model (their
        eager quantized twin is a graph of fake-quant nodes, not what XNNPACK runs).

        ``8da4w`` programs compare with two references. The check's ``atol``/``min_cosine``
        (default 5e-2 and 0.9999) hold against **torchao's quantized eager model** (the copy
        :meth:`transform_model` made, made again): both quantize the activations per token at
        run time and multiply by the same int4 weights and bf16 group scales (quantized with
        ``weight_scale_dtype = bfloat16``, the scales XNNPACK stores anyway), so what remains
        is summation order and an activation landing on the other side of a rounding step.
        Seen: 2e-7 of the outputs' range on MLPs; on the robot policy's ``predict_actions``
        (outputs within +-1) 1.2e-7 at batch 1 and up to 6.5e-3 at batch 2 and 8 (a token's
        activation rounded to the next int8 step), cosine >= 0.999996. With float32 scales
        (ExecuTorch's LLM export) the same program is 1.1e-2 and 0.99976 from its eager
        model: XNNPACK's bf16 rounding of the scales, which would hide a real fault of that
        size. Against the **float model** 4-bit weights cost far more, data-dependently (seen
        on MLPs: max error up to 0.13 of the outputs' range, cosine >= 0.9948; on the robot
        policy: 0.08 and cosine >= 0.983): only the direction is bounded there, by
        ``min_float_cosine`` (default 0.95), which catches a model that 4-bit weights break.
        """
        if options.quantize == "8da4w":
            return EIGHT_DA_FOUR_W_CHECK
        return QUANTIZED_CHECK.get(options.quantize, self.default_check)

    def lowering_weight(self, options) -> float:
        """Partitioning and each partition's own passes and serialization: about three times a
        portable lowering (the robot policy: 17 s against 4 s); quantizing calibrates and exports
        again (4)."""
        quantize = options.get("quantize", "none") if isinstance(options, dict) else getattr(options, "quantize", "none")
        return 3.0 if quantize == "none" else 4.0

    def calibrates(self, options) -> bool:
        """``int8``: static quantization, calibrated (on the samples where there are some)."""
        quantize = options.get("quantize") if isinstance(options, dict) else getattr(options, "quantize", None)
        return quantize == "int8"

    def workarounds(self, options, program) -> dict[str, str]:
        """:data:`QS8_MEAN` for a statically quantized program with a dynamic dim."""
        quantize = options.get("quantize") if isinstance(options, dict) else getattr(options, "quantize", None)
        if quantize == "int8" and any(m.dims for m in program.methods):
            return {QS8_MEAN: QS8_MEAN_WHY}
        return {}

    def check_kind(self, options=None) -> CheckKind:
        quantize = options.get("quantize") if isinstance(options, dict) else getattr(options, "quantize", None)
        return TORCHAO_REFERENCE if quantize == "8da4w" else EXECUTORCH_RUNTIME

    def warm(self) -> None:
        """XNNPACK's passes match each graph against pattern graphs (bilinear upsampling, SDPA)
        that upstream makes, by exporting small modules, the first time a process lowers for it
        (``functools.lru_cache``): 3 to 4 s of every program's lowering in a fresh child."""
        from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa

        bilinear_2d.get_graphs_dict()
        sdpa.get_graphs()

    def transform_model(self, model, options, program):
        """``8da4w``: a copy of ``model`` whose linears torchao quantized (:func:`quantized_8da4w`)."""
        if options.quantize != "8da4w":
            return model
        return quantized_8da4w(model, options, program.name, probe=example_probe(program))

    def transform_notes(self, model) -> list[str]:
        """The linears an 8da4w copy keeps float because other code takes their weight."""
        kept = KEPT_FLOAT.get(model)
        if not kept:
            return []
        shown = ", ".join(f"{name} ({taker})" for name, taker in list(kept.items())[:3])
        more = f" and {len(kept) - 3} more" if len(kept) > 3 else ""
        return [f"8da4w: {len(kept)} linear{'s' if len(kept) > 1 else ''} kept float: {shown}{more} (their weight is "
                "taken by other code than their forward, which torchao's 4-bit weights do not serve); the others are 4-bit"]

    def prepare(self, exported_program, data_name, options, export, calibration):
        if options.quantize in ("int8-dynamic", "int8"):
            exported_program = export(_quantized(exported_program.module(), options.quantize, calibration))
        if data_name is None:
            return exported_program
        from executorch.exir.passes.external_constants_pass import (
            delegate_external_constants_pass_unlifted,
        )

        module = exported_program.module()
        delegate_external_constants_pass_unlifted(module=module, gen_tag_fn=lambda _node: data_name)
        return export(module)

    def place_weights(self, manager, config, data_name) -> None:
        """Every named data entry of an XNNPACK program is a delegate weight that XNNPACK's runtime
        also reads from the ``.ptd``: those its own passes made after the tagging (BatchNorm folded
        into a convolution or linear, a lone BatchNorm as a depthwise convolution) move there
        (:mod:`ptebuild.lowering.placement`)."""
        from ptebuild.lowering.placement import move_named_data

        move_named_data(manager, config, data_name)

    def partitioners(self, options, program=None, keep_clones: bool = False) -> list:
        from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
        from executorch.backends.xnnpack.partition.config.generic_node_configs import MeanDimConfig
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        from ptebuild.backends.xnnpack.pad import pad_config

        left_out = set()
        if program is not None and QS8_MEAN in self.workarounds(options, program):
            left_out.add(MeanDimConfig)
        if keep_clones:
            left_out |= {config for config in ALL_PARTITIONER_CONFIGS if config.__name__ in ("CloneConfig", "CloneDimOrderConfig")}
        configs = [config for config in ALL_PARTITIONER_CONFIGS if config not in left_out]
        if options.quantize in ("int8", "int8-dynamic"):  # a pad between two quantizations: to the kernels (backends/xnnpack/pad.py)
            pad = pad_config()
            configs = [pad if config.__name__ == "ConstantPadConfig" else config for config in configs]
        elif not left_out:
            return [XnnpackPartitioner(per_op_mode=options.per_op_mode)]
        return [XnnpackPartitioner(configs=configs, per_op_mode=options.per_op_mode)]

    def fallback_partitioners(self, error, options, program):
        """:data:`PASS_THROUGH`: lowered again with clones left to the portable kernels."""
        if PASS_THROUGH_TEXT not in str(error):
            return None
        return self.partitioners(options, program, keep_clones=True), PASS_THROUGH_WHY

    def reference_model(self, model, program):
        """``8da4w``: torchao's eager model quantized as the program was (:meth:`check_defaults`);
        else ``model``."""
        options = self.program_options(program)
        if options.quantize != "8da4w":
            return model
        return quantized_8da4w(model, options, program.name, probe=example_probe(program))

    def check(self, model, program, pte, ptd, samples=None):
        """``8da4w``: against torchao's eager model quantized as the program was, within the
        check's tolerances, and against ``model`` (float) in direction (``min_float_cosine``).
        A PT2E-quantized program of a model with state that fails says so (``xnnpack-pt2e-state``)."""
        options = self.program_options(program)
        if options.quantize in ("int8", "int8-dynamic"):
            from ptebuild.errors import CheckError
            from ptebuild.lowering.state import with_state

            try:
                return super().check(model, program, pte, ptd, samples)
            except CheckError as error:
                stated = with_state(error, model, program, " and is PT2E-quantized")  # the known limit xnnpack-pt2e-state
                if stated is None:
                    raise
                raise stated from error
        if options.quantize != "8da4w":
            return super().check(model, program, pte, ptd, samples)
        from ptebuild.lowering.check import DirectionBound, check_program

        bound = options.min_float_cosine if options.min_float_cosine is not None else DEFAULT_MIN_FLOAT_COSINE
        float_model = DirectionBound(
            model, bound, "the float model",
            f"4-bit weights change this model too much: use quantize = 'int8-dynamic', a smaller group_size, or "
            f"lower programs.{program.name}.options.min_float_cosine",
        )
        reference = self.reference_model(model, program)
        figures = check_program(reference, program, pte, ptd, how=" (torchao's 8da4w eager model)", direction=float_model,
                                samples=samples)
        return figures, TORCHAO_REFERENCE.name


def _quantized(module, scheme: str, calibration):
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from ptebuild.lowering.state import restore_buffers, saved_buffers

    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=scheme == "int8-dynamic")
    state = {name for name, _ in module.named_buffers()}  # the model's own, not the observers prepare adds
    reference = copy.deepcopy(module) if state and calibration else None
    prepared = prepare_pt2e(module, XNNPACKQuantizer().set_global(config))
    saved = saved_buffers(prepared, state)
    for inputs in calibration:
        prepared(*inputs)
    # Calibration ran the model: a state it updates in place (a counter, a running mean) goes back
    # to what it was, the program's initial state (it started from the calibration's last). What
    # PT2E computes of such a state is still not the model's (the known limit xnnpack-pt2e-state).
    restore_buffers(prepared, saved)
    converted = convert_pt2e(prepared)
    restore_buffers(converted, saved)  # its constant folding ran the updates too
    if reference is not None:
        _same_state_after_a_call(reference, converted, calibration[0], saved)
    return converted


def _same_state_after_a_call(reference, converted, inputs, saved) -> None:
    """Raise ValueError (the known limit ``xnnpack-pt2e-state``) if one call of the quantized
    module leaves its state far from what the float module's call leaves: PT2E quantized the
    state's in-place update itself (a running mean's ``add_`` applied to a quantized copy of the
    buffer), and the program's state would go astray, within the outputs' int8 tolerances."""
    import torch

    trial = copy.deepcopy(converted)
    with torch.no_grad():
        reference(*inputs)
        trial(*inputs)
    theirs = dict(trial.named_buffers())
    astray = []
    for name, value in reference.named_buffers():
        if name not in saved or name not in theirs:
            continue
        expected, got = value.float(), theirs[name].float()
        moved = float((expected - saved[name].float()).abs().max()) if expected.numel() else 0.0
        error = float((expected - got).abs().max()) if expected.numel() else 0.0
        if error > 0.25 * moved + 1e-6:  # int8 keeps 1/127 of a range: a quarter of the update is no rounding
            astray.append(f"{name}: {error:.3g} off after one call, of an update of {moved:.3g}")
    if astray:
        raise ValueError(f"the quantized model's state after one call is not the float model's ({'; '.join(astray)}): the "
                         f"model updates buffers in place ({', '.join(n.split(':')[0] for n in astray)}) and is PT2E-quantized")


KEPT_FLOAT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""An 8da4w copy -> ``{linear: the function that took its weight}`` of the linears it kept float."""


PASS_THROUGH_TEXT = "This is likely due to pass through arguments"
"""XNNPACK's refusal of a partition whose output is one of its inputs (``XNNPACKBackend.preprocess``)."""
PASS_THROUGH_WHY = (
    "lowered again with clones outside the XNNPACK delegate: XNNPACK refused a partition whose output is one of its "
    "inputs (a delegated clone passes its input through, as in `return out, self.state.clone()` after the state's "
    "in-place update); the clones run in ExecuTorch's portable kernels"
)
"""The build's warning when :meth:`XnnpackBackend.fallback_partitioners` applied."""


def eight_da_four_w_config(group_size: int):
    """torchao's 8da4w config: int4 weights in groups of ``group_size``, int8 dynamic activations.

    ExecuTorch's LLM export (``extension/llm/export/quantize.py``) uses this config; here the
    group scales are bf16 (``weight_scale_dtype``), as XNNPACK stores them (``node_visitor.py``:
    ``scale.to(torch.bfloat16)`` for per-channel-group weights): the int4 values are then
    rounded against the scales the kernel really uses, and the eager model computes what the
    delegate computes.
    """
    import torch
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig
    from torchao.quantization.granularity import PerGroup

    int4 = torch.int4  # type: ignore[attr-defined]  # in torch since 2.5; absent from its stubs
    return Int8DynamicActivationIntxWeightConfig(
        weight_dtype=int4, weight_granularity=PerGroup(group_size), weight_scale_dtype=torch.bfloat16
    )


def quantized_8da4w(model, options, program_name: str, probe=None):
    """A copy of ``model`` whose ``nn.Linear`` layers are 8da4w (``model`` is left as it is).

    Linears whose weight other code takes, found by ``probe(model)`` (a call of the model's
    methods: :mod:`ptebuild.backends.xnnpack.linear_use`), stay float. Raises a BuildError naming
    the first linear whose input features ``group_size`` does not divide (unless
    ``skip_ungroupable``: such linears stay float), or if no linear is left.
    """
    import copy

    import torch
    from torchao.quantization import quantize_

    from ptebuild.errors import BuildError

    group = options.group_size or DEFAULT_GROUP_SIZE
    quantized = copy.deepcopy(model)
    elsewhere = linears_used_elsewhere(quantized, probe) if probe is not None else {}
    linears = {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and name not in elsewhere}
    ungroupable = {name for name, m in linears.items() if m.in_features % group}
    where = f"programs.{program_name}"
    if ungroupable and not options.skip_ungroupable:
        name = min(ungroupable, key=list(linears).index)
        raise BuildError(
            f"options.group_size: linear {name!r} has {linears[name].in_features} input features, not a multiple of "
            f"group_size {group}; {_group_size_hint(linears.values())}",
            location=where,
        )
    if len(ungroupable) == len(linears):
        what = "no nn.Linear" if not linears else f"no linear whose input features group_size {group} divides"
        if elsewhere:
            what += f" (beside {len(elsewhere)} whose weight other code takes: {', '.join(elsewhere)})"
        raise BuildError(f"quantize = '8da4w' quantizes linear layers, and the model has {what}; use quantize = 'int8-dynamic'",
                         location=where)
    quantize_(quantized, eight_da_four_w_config(group), filter_fn=lambda m, fqn: fqn in linears and fqn not in ungroupable)
    KEPT_FLOAT[quantized] = elsewhere
    return quantized


def _group_size_hint(linears) -> str:
    """What to do about a linear that cannot be grouped: a group_size that fits them all, if any."""
    import math

    common = math.gcd(*(m.in_features for m in linears))
    fits = [g for g in range(GROUP_MULTIPLE, common + 1, GROUP_MULTIPLE) if common % g == 0]
    if fits:
        return f"group_size = {fits[-1]} divides every linear's, or set skip_ungroupable = true to keep such linears float"
    return "no multiple of 32 divides every linear's: set skip_ungroupable = true to keep such linears float"


BACKEND = XnnpackBackend(
    name="xnnpack",
    options_factory=options_model,
    same_bytes_on_every_platform=True,  # a flatbuffer of the graph and its weights: nothing of the host
    default_check=CheckTolerances(atol=1e-3, rtol=1e-4, min_cosine=0.9999),
    payload_readers=PAYLOAD_READERS,
)
