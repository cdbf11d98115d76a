"""The portable backend: ExecuTorch's portable CPU kernels, no delegate."""

from __future__ import annotations

import functools

from ptebuild.backends.base import Backend, CheckTolerances


@functools.cache
def options_model() -> type:
    from ptebuild.backends.options import BackendOptions

    class PortableOptions(BackendOptions):
        """The portable backend takes no options."""

    return PortableOptions


BACKEND = Backend(
    name="portable",
    options_factory=options_model,
    same_bytes_on_every_platform=True,  # a flatbuffer of the graph and its weights: nothing of the host
    default_check=CheckTolerances(atol=1e-4, rtol=1e-5, min_cosine=0.99999),
)
