"""The XNNPACK backend: CPU delegate for float and quantized operators.

With a data name, the delegate's own constants (keyed by SHA-256 in the named data store) are
tagged for the external ``.ptd`` through ExecuTorch's delegate constant tagging: the tag is set
on the unlifted graph's ``get_attr`` nodes, and the program is exported again so that the tag
reaches the lowered program.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptebuild.backends.base import Backend, BackendOptions, CheckTolerances


class XnnpackOptions(BackendOptions):
    per_op_mode: bool = False
    """Delegate each operator on its own instead of the largest partitions (slower, for debugging)."""


@dataclass(frozen=True)
class XnnpackBackend(Backend):
    def prepare(self, exported_program, data_name, options, export):
        if data_name is None:
            return exported_program
        from executorch.exir.passes.external_constants_pass import (
            delegate_external_constants_pass_unlifted,
        )

        module = exported_program.module()
        delegate_external_constants_pass_unlifted(module=module, gen_tag_fn=lambda _node: data_name)
        return export(module)

    def partitioners(self, options) -> list:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        return [XnnpackPartitioner(per_op_mode=options.per_op_mode)]


BACKEND = XnnpackBackend(
    name="xnnpack",
    options_model=XnnpackOptions,
    keeps_data_in_pte=False,
    default_check=CheckTolerances(atol=1e-3, min_cosine=0.9999),
)
