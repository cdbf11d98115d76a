"""The XNNPACK backend: CPU delegate for float and quantized operators.

Quantization (``options.quantize``) uses ExecuTorch's XNNPACKQuantizer through PT2E: the method
is prepared, calibrated on inputs generated from the model's seed (the example sizes and the
dynamic dims' extremes, several draws each), converted and exported again.

With a data name, the delegate's own constants (keyed by SHA-256 in the named data store) are
tagged for the external ``.ptd`` through ExecuTorch's delegate constant tagging: the tag is set
on the unlifted graph's ``get_attr`` nodes, and the program is exported again so that the tag
reaches the lowered program.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

from ptebuild.backends.base import Backend, CheckTolerances


@functools.cache
def options_model() -> type:
    from ptebuild.backends.options import BackendOptions

    class XnnpackOptions(BackendOptions):
        per_op_mode: bool = False
        """Delegate each operator on its own instead of the largest partitions (slower, for debugging)."""
        quantize: Literal["none", "int8-dynamic", "int8"] = "none"
        """``int8-dynamic``: int8 per-channel weights, activations quantized at run time;
        ``int8``: int8 weights and activations, calibrated on generated inputs."""

    return XnnpackOptions


QUANTIZED_CHECK = {
    "int8-dynamic": CheckTolerances(atol=0.1, min_cosine=0.995),
    "int8": CheckTolerances(atol=0.5, min_cosine=0.97),
}


@dataclass(frozen=True)
class XnnpackBackend(Backend):
    def check_defaults(self, options) -> CheckTolerances:
        return QUANTIZED_CHECK.get(options.quantize, self.default_check)

    def prepare(self, exported_program, data_name, options, export, calibration):
        if options.quantize != "none":
            exported_program = export(_quantized(exported_program.module(), options.quantize, calibration))
        if data_name is None:
            return exported_program
        from executorch.exir.passes.external_constants_pass import (
            delegate_external_constants_pass_unlifted,
        )

        module = exported_program.module()
        delegate_external_constants_pass_unlifted(module=module, gen_tag_fn=lambda _node: data_name)
        return export(module)

    def partitioners(self, options, program=None) -> list:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        return [XnnpackPartitioner(per_op_mode=options.per_op_mode)]


def _quantized(module, scheme: str, calibration):
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=scheme == "int8-dynamic")
    prepared = prepare_pt2e(module, XNNPACKQuantizer().set_global(config))
    for inputs in calibration:
        prepared(*inputs)
    return convert_pt2e(prepared)


BACKEND = XnnpackBackend(
    name="xnnpack",
    options_factory=options_model,
    same_bytes_on_every_platform=True,  # a flatbuffer of the graph and its weights: nothing of the host
    default_check=CheckTolerances(atol=1e-3, min_cosine=0.9999),
)
