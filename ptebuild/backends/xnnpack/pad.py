"""A constant pad whose input is quantized and whose output is not (or differently) stays outside
the XNNPACK delegate.

XNNPACK's partitioner takes ``aten.constant_pad_nd`` as a float operator (``ConstantPadConfig``)
and, in a statically quantized graph, hands it the tensors around it as they are in the delegate:
a dequantized input is the quantized tensor there. XNNPACK's static constant pad copies values,
so its input and output must be one datatype with one scale and zero point; where a pad reads a
dequantized tensor and hands a float one on (torchvision's swin_t: the patch merging's pad, read
by strided slices), XNNPACK refuses the node when the program is loaded: ``Failed to create
StaticConstantPad node ... xnn_status_invalid_parameter`` (executorch 1.5.1), after a lowering
that succeeded. :func:`pad_config` is ``ConstantPadConfig`` that leaves such a pad to ExecuTorch's
kernels (the dequantize and the pad in float: the values the quantized model computes); a pad in
a float graph, or with one quantization on both sides, is delegated as before.

Runs in a worker: imports executorch.
"""

from __future__ import annotations

import logging
from typing import Any


def _quantization(node: Any) -> tuple[Any, ...] | None:
    """A quantize or dequantize node's scale and zero point (as its arguments give them), else None."""
    target = str(getattr(node, "target", ""))
    if getattr(node, "op", "") != "call_function" or "quantize_per_tensor" not in target:
        return None
    return tuple(_value(a) for a in node.args[1:3])


def _value(arg: Any) -> Any:
    return arg.name if hasattr(arg, "op") else arg


def pad_config() -> type:
    """``ConstantPadConfig`` that refuses a pad whose input and output are quantized differently."""
    from executorch.backends.xnnpack.partition.config.generic_node_configs import ConstantPadConfig
    from executorch.exir.backend.utils import WhyNoPartition

    why = WhyNoPartition(logger=logging.getLogger(__name__))

    class SameQuantizationPad(ConstantPadConfig):
        def check_constraints(self, node: Any, ep: Any) -> bool:
            if not super().check_constraints(node, ep):
                return False
            before = _quantization(node.args[0])
            if before is not None and any(_quantization(user) != before for user in node.users):
                why(node, reason="its input is quantized and its output is not, or otherwise: XNNPACK's pad cannot change that")
                return False
            return True

    return SameQuantizationPad
