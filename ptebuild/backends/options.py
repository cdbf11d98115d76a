"""The base of every backend's options model (pydantic: imported only to validate options)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class BackendOptions(BaseModel):
    """Base of each backend's ``options`` table: frozen, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
