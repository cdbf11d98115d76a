"""Dynamic dims that keep their declared range on their way to coremltools.

coremltools makes each input's shape range from the exported program's ``range_constraints``;
a Core ML model refuses, on the device, an input outside its range. ExecuTorch 1.5.1 narrows a
dim declared ``min = 1`` to a lower bound of 2 on the way, twice:

- its passes rebuild ``range_constraints`` from the tracer's symbol ranges
  (``exir._program_utils._get_updated_range_constraints``), where torch's tracer starts every
  backed size at 2 (it assumes sizes 0 and 1 are special) while the exported program says 1;
- re-tracing during ``to_edge`` (decompositions) refines those ranges again by the same rule.

So a policy exported for batches of 1 to 8 became a Core ML model for 2 to 8 (seen on the robot
policy, caught by the structural check). :func:`keep_declared_ranges` widens the tracer's range of
each such symbol back to the exported program's, for that program only (in ``prepare``), and
:func:`sizes_stay_oblivious` keeps re-tracing from narrowing them again (torch's
``backed_size_oblivious``: sizes are reasoned about as torch.export did, without assuming 0 or 1
away) while the Core ML program is lowered.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


def keep_declared_ranges(exported_program) -> None:
    """Widen the tracer's range of each dynamic dim of ``exported_program`` back to its own."""
    from torch._guards import detect_fake_mode

    values = [node.meta["val"] for node in exported_program.graph.nodes if node.meta.get("val") is not None]
    fake_mode = detect_fake_mode(values)
    if fake_mode is None or fake_mode.shape_env is None:
        return
    tracer_ranges = fake_mode.shape_env.var_to_range
    for symbol, declared in exported_program.range_constraints.items():
        traced = tracer_ranges.get(symbol)
        if traced is not None and declared.lower < traced.lower and declared.upper == traced.upper:
            tracer_ranges[symbol] = declared


@contextmanager
def sizes_stay_oblivious() -> Iterator[None]:
    """During the block, re-tracing does not narrow a size's range by assuming it is not 0 or 1."""
    from torch.fx.experimental import _config

    # patch() is added to the module by torch's install_config_module, which type checkers cannot see.
    with _config.patch(backed_size_oblivious=True):  # type: ignore[attr-defined]
        yield
