"""SHA-256 weight keys for CUDA programs: each storage key becomes ``<key>@sha256:<hex>``.

Weight keys: 1.5.1 keys each storage ``cuda_fqn_weight:cuda:<fqn>`` in the ``.ptd`` and in the
delegate's payload (:mod:`ptebuild.runtime.payload_readers.cuda`).
:meth:`ptebuild.backends.cuda.CudaBackend.rewrite_keys` (:func:`key_cuda_weights_by_sha256`)
appends ``@sha256:<hex of the storage bytes>`` on both sides, so a ``.pte`` finds only its own
weights, in ptebuild's loader and in ExecuTorch's CUDA runtime (which looks each payload key up
verbatim in the named data).
"""

from __future__ import annotations


def _buffer_sha256(buffer) -> str:
    import hashlib

    if hasattr(buffer, "sha256"):
        return buffer.sha256().hex()
    return hashlib.sha256(bytes(buffer)).hexdigest()


def key_cuda_weights_by_sha256(manager, config) -> dict[str, str]:
    """Appends ``@sha256:<hex>`` to every CUDA storage key, in the ``.ptd`` and the payloads; reserializes.

    Also drops the ``shim_library_path`` compile spec (an absolute path of the building
    machine, which the runtime never reads) from the delegates, so the ``.pte`` does not
    depend on where the build ran. Returns ``{old key: new key}``.
    """
    from executorch.exir._serialize._serialize import serialize_for_executorch
    from executorch.exir.schema import DataLocation

    from ptebuild.errors import REPORT, BuildError
    from ptebuild.runtime.keys import SHA256_MARKER, sha256_in_key, weight_key
    from ptebuild.runtime.payload_readers import cuda as cuda_payload

    named = manager._named_data
    emitted = manager._emitter_output
    if named is None:
        raise BuildError(f"the CUDA delegate stored no named data (executorch 1.5.1 does); {REPORT}")
    renamed: dict[str, str] = {}
    for _tag, entries in named.external_data.items():
        new_entries = {}
        for key, entry in entries.items():
            digest = _buffer_sha256(named.buffers[entry.buffer_index])
            if SHA256_MARKER in key and sha256_in_key(key) == digest:
                new_key = key  # keyed already (the pass ran twice)
            else:
                new_key = weight_key(key, digest)
            renamed[key] = new_key
            new_entries[new_key] = entry
        entries.clear()
        entries.update(new_entries)
    identity = {new: new for new in renamed.values()}
    done: set[int] = set()
    for plan in emitted.program.execution_plan:
        for index, delegate in enumerate(plan.delegates):
            if delegate.id != cuda_payload.BACKEND_ID:
                continue
            delegate.compile_specs = [s for s in delegate.compile_specs if s.key != "shim_library_path"]
            ref = delegate.processed
            if ref.location != DataLocation.INLINE:
                raise BuildError(f"method {plan.name}: CUDA delegate {index} is not inline in the emitted program; {REPORT}")
            if ref.index in done:
                continue
            done.add(ref.index)
            inline = emitted.program.backend_delegate_data[ref.index]
            where = f"method {plan.name!r} CUDA delegate {index}"
            payload = cuda_payload.decode(inline.data, where)
            mapping = {}
            for weight in payload.weights:
                key = weight.storage_key
                if key in renamed or key in identity:
                    mapping[key] = renamed.get(key, key)
                elif key in named.pte_data:
                    raise BuildError(f"{where}: weight {weight.fqn!r} is stored inside the .pte, not in the .ptd; {REPORT}")
                else:
                    raise BuildError(f"{where}: weight {weight.fqn!r} key {key!r} is in no named data; {REPORT}")
            inline.data = cuda_payload.encode(payload.with_keys(mapping))
    manager._pte_data, manager._tensor_data = serialize_for_executorch(
        emitted, config, manager._data_serializer, named
    )
    manager._buffer = None
    return renamed
