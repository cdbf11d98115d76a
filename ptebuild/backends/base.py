"""What every backend shares: check tolerances and the options base model."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict


class BackendOptions(BaseModel):
    """Base of each backend's ``options`` table: frozen, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True)
class CheckTolerances:
    atol: float
    min_cosine: float


@dataclass(frozen=True)
class Backend:
    name: str
    options_model: type[BackendOptions]
    keeps_data_in_pte: bool
    default_check: CheckTolerances

    def check_defaults(self, options) -> CheckTolerances:
        """The tolerances for a program with these options (quantized programs need looser ones)."""
        return self.default_check

    def prepare(self, exported_program, data_name, options, export, calibration):
        """Return the exported program to lower (default: unchanged).

        ``export(module)`` exports ``module`` again with the method's example inputs and dynamic
        shapes, for backends that rewrite or tag the unlifted graph; ``calibration`` is a list of
        input tuples for backends that quantize.
        """
        return exported_program

    def partitioners(self, options) -> list:
        return []
