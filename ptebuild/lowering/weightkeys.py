"""Keys every portable external weight by the SHA-256 of its bytes, so a ``.ptd`` fits one ``.pte``.

Why: executorch 1.5.1 keys a non-delegated external constant by its parameter name (FQN),
so two programs of one architecture produce the same ``.pte`` and either ``.ptd`` loads,
silently, with either. After this pass the key is ``<fqn>@sha256:<hex>`` (format in
:mod:`ptebuild.runtime.keys`): a ``.pte`` changes when its weights do, and loading it with
another program's ``.ptd`` fails at method load ("Failed to get metadata for key …").
XNNPACK delegate constants need nothing: the delegate already keys them by the bare hex
SHA-256 of their bytes in the named data store.

How it works: ``to_executorch`` emits and serializes eagerly. The emitter has already
deduplicated external constants by content into ``external_constant_buffer`` (so a weight
shared by several methods is one buffer), and each EXTERNAL tensor's ``data_buffer_idx``
points into that list. This pass hashes each buffer once, renames
``extra_tensor_info.fully_qualified_name`` of every EXTERNAL tensor and the keys of
``external_constant_map`` to match, then serializes the ``.pte`` and ``.ptd`` again with
the same ``serialize_for_executorch`` call the manager made. It relies on executorch
1.5.1's private ``ExecutorchProgramManager`` fields and checks they exist.

Where to call it: right after ``to_executorch`` and before anything reads the output
(``buffer``, ``write_to_file``, ``write_tensor_data_to_file``, ``data_files``), with the
same config::

    config = ExecutorchBackendConfig(external_constants=lambda node: data_name)
    et = edge.to_executorch(config)
    key_constants_by_sha256(et, config)
    with open(out_dir / f"{program}.pte", "wb") as f:
        et.write_to_file(f)
    et.write_tensor_data_to_file(out_dir)       # writes <data_name>.ptd

``external_constants=lambda node: data_name`` names the file (the tag is the file name);
``external_constants=True`` would write ``_default_external_constant.ptd``. For XNNPACK,
tag the delegate's constants with the same name on an *unlifted* module before lowering,
so they land in the same ``<data_name>.ptd``::

    tagged = torch.export.export(model, example_inputs).module()
    delegate_external_constants_pass_unlifted(tagged, gen_tag_fn=lambda node: data_name)
    ep = torch.export.export(tagged, example_inputs)
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    # then as above: to_executorch(config), key_constants_by_sha256(et, config), write.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ptebuild.errors import REPORT, BuildError
from ptebuild.runtime.keys import SHA256_MARKER, sha256_in_key, weight_key

# Private ExecutorchProgramManager fields (executorch 1.5.1) this pass reads and replaces.
_MANAGER_FIELDS = ("_emitter_output", "_data_serializer", "_named_data", "_pte_data", "_tensor_data")


def key_constants_by_sha256(et_program_manager: Any, config: Any) -> dict[str, str]:
    """Renames the program's portable external constants to ``<fqn>@sha256:<hex>`` and reserializes.

    Args:
        et_program_manager: the ``ExecutorchProgramManager`` returned by ``to_executorch``,
            not yet written out.
        config: the ``ExecutorchBackendConfig`` given to ``to_executorch`` (its alignments
            are needed to serialize again).

    Returns:
        ``{new key: fqn}`` for every external constant; empty (and nothing reserialized)
        when the program keeps no portable constant outside the ``.pte``. Keyed by the new
        key because one FQN may name different bytes in two methods: each gets its own key.

    Raises:
        BuildError: the manager lacks the executorch 1.5.1 fields this pass relies on, or
            the emitted program is inconsistent.
    """
    from executorch.exir._serialize._serialize import serialize_for_executorch

    missing = [name for name in _MANAGER_FIELDS if not hasattr(et_program_manager, name)]
    if missing:
        raise BuildError(
            f"cannot key weights by sha256: ExecutorchProgramManager has no {', '.join(missing)}"
            "; install executorch 1.5.1, the version ptebuild supports (constraints.txt)"
        )
    emitted = et_program_manager._emitter_output
    if not emitted.external_constant_map:
        return {}
    digests = [hashlib.sha256(buffer).hexdigest() for buffer in emitted.external_constant_buffer]
    new_map, renamed = _rename_external_tensors(
        emitted.program, digests, emitted.external_constant_map
    )
    emitted.external_constant_map.clear()
    emitted.external_constant_map.update(new_map)
    # The first serialization goes before the second is made: never two of the weights file at once.
    et_program_manager._pte_data = et_program_manager._tensor_data = et_program_manager._buffer = None
    et_program_manager._pte_data, et_program_manager._tensor_data = serialize_for_executorch(
        emitted, config, et_program_manager._data_serializer, et_program_manager._named_data
    )
    # The manager caches the serialized .pte on first .buffer access; drop any stale copy.
    et_program_manager._buffer = None
    return renamed


def _rename_external_tensors(
    program: Any, digests: list[str], old_map: dict[str, dict[str, int]]
) -> tuple[dict[str, dict[str, int]], dict[str, str]]:
    """Rewrites each EXTERNAL tensor's FQN in place; returns the new tag map and {new key: fqn}."""
    from executorch.exir.schema import Tensor, TensorDataLocation

    new_map: dict[str, dict[str, int]] = {tag: {} for tag in old_map}
    renamed: dict[str, str] = {}
    done: set[int] = set()  # ExtraTensorInfo objects may be shared between values
    for plan in program.execution_plan:
        for value in plan.values:
            tensor = value.val
            if not isinstance(tensor, Tensor):
                continue
            info = tensor.extra_tensor_info
            if info is None or info.location != TensorDataLocation.EXTERNAL:
                continue
            index = tensor.data_buffer_idx
            if not 0 <= index < len(digests):
                raise BuildError(
                    f"method {plan.name}: external tensor {info.fully_qualified_name!r} points "
                    f"at buffer {index}, the program has {len(digests)}; {REPORT}"
                )
            key, fqn = _rename(info, digests[index], renamed, done)
            tags = [tag for tag, by_name in old_map.items() if fqn in by_name or key in by_name]
            if not tags:
                raise BuildError(
                    f"method {plan.name}: external tensor {fqn!r} is in no external data file; {REPORT}"
                )
            for tag in tags:
                new_map[tag][key] = index
            renamed[key] = fqn
    return {tag: keys for tag, keys in new_map.items() if keys}, renamed


def _rename(info: Any, digest: str, renamed: dict[str, str], done: set[int]) -> tuple[str, str]:
    """Gives ``info`` its sha256 key once; returns ``(key, fqn)``. Calling the pass twice is harmless."""
    current = info.fully_qualified_name
    if id(info) in done:
        return current, renamed[current]
    if SHA256_MARKER in current and sha256_in_key(current) == digest:
        return current, current.rpartition(SHA256_MARKER)[0]
    info.fully_qualified_name = weight_key(current, digest)
    done.add(id(info))
    return info.fully_qualified_name, current
