"""The portable backend: ExecuTorch's portable CPU kernels, no delegate."""

from __future__ import annotations

from ptebuild.backends.base import Backend, BackendOptions, CheckTolerances


class PortableOptions(BackendOptions):
    """The portable backend takes no options."""


BACKEND = Backend(
    name="portable",
    options_model=PortableOptions,
    keeps_data_in_pte=False,
    default_check=CheckTolerances(atol=1e-4, min_cosine=0.99999),
)
