"""Weights where the manifest says: a delegate's weights that its lowering left inside the ``.pte``
moved into the program's ``.ptd``.

Why: with a data name, ptebuild tags every constant of the exported graph for the ``.ptd``
before lowering (``delegate_external_constants_pass_unlifted``), but a delegate's own passes may
make new constants afterwards, untagged. ExecuTorch 1.5.1's XNNPACK ``FuseBatchNormPass`` folds
a BatchNorm into the convolution or linear before it (``create_constant_placeholder``, the fused
weight and bias: new placeholders without ``meta["custom"]["delegate_constant_tag"]``) and
``DecomposeBatchNorm`` turns a lone BatchNorm into a 1x1 depthwise convolution with new weights;
XNNPACK's serializer then puts every untagged constant into the ``.pte``'s named data
(``NamedDataStore.add_named_data(..., external_tag=None)``). ExecuTorch's resnet8 example gave a
306,432-byte ``.pte`` holding its ten folded convolution weights and a 14,760-byte ``.ptd``.

How: after ``to_executorch`` (and before anything reads its output), :func:`move_named_data`
moves the named data entries the ``.pte`` would carry into the data file's entries
(``NamedDataStoreOutput.pte_data`` -> ``external_data[data_name]``) and serializes the ``.pte``
and ``.ptd`` again with the call the manager made. The keys stay the SHA-256 of the bytes that
XNNPACK gives them; ExecuTorch's runtime gives a delegate one map of the ``.pte``'s named data
and the ``.ptd``'s (the check loads them so), so nothing else changes. Like
:mod:`.weightkeys`, it relies on executorch 1.5.1's private ``ExecutorchProgramManager`` fields
and checks they exist.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ptebuild.errors import BuildError

_MANAGER_FIELDS = ("_emitter_output", "_data_serializer", "_named_data", "_pte_data", "_tensor_data")


def move_named_data(manager: Any, config: Any, data_name: str, keep: Callable[[str], bool] = lambda _key: False) -> tuple[str, ...]:
    """Move the ``.pte``'s named data entries (all but those ``keep`` says are not weights) into
    ``<data_name>.ptd``; return the keys moved (none moved: nothing serialized again).

    Raises:
        BuildError: the manager lacks the executorch 1.5.1 fields this relies on.
    """
    from executorch.exir._serialize._serialize import serialize_for_executorch

    missing = [name for name in _MANAGER_FIELDS if not hasattr(manager, name)]
    if missing:
        raise BuildError(
            f"cannot move weights into '{data_name}.ptd': ExecutorchProgramManager has no {', '.join(missing)}"
            "; install the executorch that constraints.txt pins (1.5.1), which ptebuild supports"
        )
    named = manager._named_data
    if named is None:
        return ()
    moved = tuple(sorted(key for key in named.pte_data if not keep(key)))
    if not moved:
        return ()
    external = named.external_data.setdefault(data_name, {})
    for key in moved:
        external[key] = named.pte_data.pop(key)
    manager._pte_data, manager._tensor_data = serialize_for_executorch(
        manager._emitter_output, config, manager._data_serializer, named
    )
    manager._buffer = None  # the manager caches the serialized .pte on first .buffer access
    return moved
