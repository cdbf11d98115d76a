"""Figures made by hand for the tests of :mod:`ptebuild.insight` (no program is lowered)."""

from __future__ import annotations

from ptebuild.insight.delegation import DelegateShare, Delegation, MethodDelegation, counts
from ptebuild.insight.memory import IoPoint, MethodMemory, TensorBytes
from ptebuild.insight.program import ProgramInsight
from ptebuild.insight.sizes import SizeSplit, WeightsFile


def figures(*, pte: int = 6_000, ptd: int = 40_000, delegated: int = 9, left: int = 1, planned: tuple[int, ...] = (37_184,),
            shared_with: tuple[str, ...] = ()) -> ProgramInsight:
    """A one-method XNNPACK program: ``delegated`` conv nodes delegated, ``left`` mean nodes not."""
    delegation = Delegation((MethodDelegation(
        "forward",
        (DelegateShare("XnnpackBackend", 1, counts(["aten_convolution_default"] * delegated + ["getitem"])),),
        counts(["aten_mean_dim"] * left + ["getitem"]),
    ),))
    size = SizeSplit(pte=pte, plan=pte - 4_000, constants=8, named_data=1_000, delegates=(("XnnpackBackend", 2_992),),
                     ptd=(WeightsFile("weights.ptd", ptd, shared_with),) if ptd else ())
    memory = (MethodMemory("forward", planned, (TensorBytes("cache", "float32", (4, 16), 256),),
                           (IoPoint("example", (("batch", 2),), 6_144, 32), IoPoint("batch max", (("batch", 8),), 24_576, 128))),)
    return ProgramInsight(delegation, size, memory)
