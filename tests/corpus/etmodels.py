"""ExecuTorch's own example models (``executorch.examples.models``, installed with executorch) as
manifest factories: ``factory = "etmodels:make"`` with ``kwargs = { name = "lstm" }``."""

from __future__ import annotations

import importlib


def make(name: str):
    """The eager model ExecuTorch's example ``name`` builds (its ``get_eager_model()``), in eval mode."""
    from executorch.examples.models import MODEL_NAME_TO_MODEL

    module, cls = MODEL_NAME_TO_MODEL[name]
    wrapper = getattr(importlib.import_module(f"executorch.examples.models.{module}"), cls)()
    return wrapper.get_eager_model().eval()
