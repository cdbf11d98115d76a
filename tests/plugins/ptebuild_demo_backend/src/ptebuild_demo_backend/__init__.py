"""``backend = "demo"``: a ptebuild backend that lives outside ptebuild, added by an entry point.

It lowers with ExecuTorch as ptebuild's own backends do, to a delegate of its own: its
partitioner (:mod:`.lowering`) gives every edge operator, and the weights those operators use,
to ``PtebuildDemoBackend``, whose payload is a JSON description of the partition (:mod:`.payload`:
its operators, inputs, outputs and the named-data keys of its weights, which ExecuTorch stores
in the ``.pte``, or in the ``.ptd`` with a data name). No ExecuTorch runtime implements that
delegate, so its programs pass a structural check (:mod:`.check`), as ptebuild's Core ML and
Vulkan programs do.

What a backend package provides, all of it declared on :data:`BACKEND` (a
:class:`ptebuild.backends.base.Backend`): its manifest name, its options model, its check's kind
and tolerances, its payload readers, and the worker hooks (``partitioners``, ``check``). This
module imports neither torch nor executorch nor pydantic: ptebuild lists and reads backends
without them.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from ptebuild.backends.base import Backend, CheckKind, CheckTolerances
from ptebuild_demo_backend.payload import DELEGATE_ID, DemoReader

STRUCTURAL = CheckKind("demo-structural", numeric=False)
"""No runtime runs the demo delegate: its payloads are read back and matched to each call."""


@functools.cache
def options_model() -> type:
    from ptebuild.backends.options import BackendOptions

    class DemoOptions(BackendOptions):
        fuse: bool = True
        """Give the delegate the largest partitions it can take (false: each operator on its own)."""

    return DemoOptions


class DemoBackend(Backend):
    def check_kind(self, options: Any = None) -> CheckKind:
        return STRUCTURAL

    def partitioners(self, options: Any, program: Any = None) -> list[Any]:
        from ptebuild_demo_backend.lowering import DemoPartitioner

        return [DemoPartitioner(fuse=options.fuse, data_name=program.data_name if program is not None else None)]

    def check(self, model: Any, program: Any, pte: Path, ptd: Path | None, samples: Any = None) -> tuple[list[Any], str]:
        from ptebuild_demo_backend.check import check_program

        return check_program(model, program, pte, ptd), STRUCTURAL.name


BACKEND = DemoBackend(
    name="demo",
    options_factory=options_model,
    default_check=CheckTolerances(atol=1e-4, min_cosine=0.99999),
    same_bytes_on_every_platform=True,
    static_shapes="records each call's tensors at fixed shapes",
    payload_readers=(DemoReader(),),
)

__all__ = ["BACKEND", "DELEGATE_ID"]
