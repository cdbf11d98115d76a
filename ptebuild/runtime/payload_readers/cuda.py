"""Reads and writes the CUDA delegate's weight metadata (``ETCUDAFQN3``), and finds it in a ``.pte``.

ExecuTorch 1.5.1's CUDA backend (AOTInductor) stores, as each delegate's ``processed`` bytes,
the key of the compiled shared object and, per weight, where the runtime finds its storage.
The runtime reads this payload at method load and looks every ``storage_key`` up, verbatim, in
the named data (the ``.pte``'s own, then the ``.ptd``); a key it does not find fails the load
("CUDA FQN storage ... is missing from named data"). The shared object itself is named data of
the ``.pte``, under ``<sha256 of the .so>_so_blob``.

Spec: executorch ``backends/cuda/cuda_weight_collector.py``, ``encode_cuda_weight_metadata``
(the pip wheel ships no C++ runtime source; the key contract above is the collector's, and
upstream pytorch/executorch#24222 keeps it). Layout, little-endian; ``str`` is a u32 byte
length followed by that many UTF-8 bytes:

==============  ===============================================================
0..10           magic ``ETCUDAFQN3``
str             so_blob_key (named-data key of the compiled ``.so``)
u32             number of entries; then per entry:
str               fqn (AOTInductor's constant FQN)
str               storage_key (named-data key of the weight's storage bytes)
u64               storage_nbytes
i32               dtype (ExecuTorch ``ScalarType``)
i32               device_type (0 CPU, 1 CUDA)
i64               storage_offset (elements)
u32               ndim
i64 * ndim        sizes
i64 * ndim        strides
==============  ===============================================================

Nothing may follow the last entry. Limits checked: ndim <= 64, every length within the payload.
ExecuTorch keys a storage ``cuda_fqn_weight:<device>:<fqn>``; ptebuild appends
``@sha256:<hex of the storage bytes>`` (:mod:`.keys`), in the payload and in the ``.ptd`` alike.

This module imports neither torch nor executorch.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import Any

from ptebuild.errors import FormatError
from ptebuild.runtime.payloads import DelegatePayload, PayloadInfo, PayloadReader

BACKEND_ID = "CudaBackend"
MAGIC = b"ETCUDAFQN3"
SO_BLOB_SUFFIX = "_so_blob"
MAX_NDIM = 64

_LENGTH = struct.Struct("<I")
# storage_nbytes, dtype, device_type, storage_offset, ndim
_ENTRY_FIXED = struct.Struct("<QiiqI")
_DIM = struct.Struct("<q")


@dataclass(frozen=True)
class CudaWeight:
    """One weight of a CUDA delegate: its FQN, the named-data key of its storage, its layout."""

    fqn: str
    storage_key: str
    storage_nbytes: int
    dtype: int
    device_type: int
    storage_offset: int
    sizes: tuple[int, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True)
class CudaPayload:
    """A CUDA delegate's ``processed`` bytes, decoded."""

    so_blob_key: str
    weights: tuple[CudaWeight, ...]

    @property
    def keys(self) -> frozenset[str]:
        """Every named-data key the delegate needs: the ``.so`` and each weight's storage."""
        return frozenset({self.so_blob_key, *(w.storage_key for w in self.weights)})

    def with_keys(self, new_keys: dict[str, str]) -> CudaPayload:
        """The payload with each storage key ``k`` replaced by ``new_keys[k]`` (KeyError if absent)."""
        return replace(
            self, weights=tuple(replace(w, storage_key=new_keys[w.storage_key]) for w in self.weights)
        )


def is_cuda_payload(blob: bytes) -> bool:
    return blob[: len(MAGIC)] == MAGIC


def decode(blob: bytes, source: str) -> CudaPayload:
    """Decodes a CUDA delegate payload. ``source`` names it in messages.

    Raises:
        FormatError: wrong magic, a field cut off (naming the field and its offset), a
            string that is not UTF-8, ndim above the limit, or bytes after the last entry.
    """
    if blob[: len(MAGIC)] != MAGIC:
        raise FormatError(
            f"{source}: not a CUDA weight payload: starts with {bytes(blob[:len(MAGIC)])!r}, "
            f"expected {MAGIC!r} (executorch 1.5.1)"
        )
    reader = _Reader(blob, source, len(MAGIC))
    so_blob_key = reader.string("so_blob_key")
    count = reader.unpack(_LENGTH, "entry count")[0]
    weights = []
    for index in range(count):
        what = f"entry {index}"
        fqn = reader.string(f"{what} fqn")
        storage_key = reader.string(f"{what} storage_key")
        nbytes, dtype, device, offset, ndim = reader.unpack(_ENTRY_FIXED, f"{what} layout")
        if ndim > MAX_NDIM:
            raise FormatError(f"{source}: {what} ({fqn!r}) has {ndim} dims at offset {reader.pos - 4}, limit {MAX_NDIM}")
        sizes = reader.dims(ndim, f"{what} sizes")
        strides = reader.dims(ndim, f"{what} strides")
        weights.append(CudaWeight(fqn, storage_key, nbytes, dtype, device, offset, sizes, strides))
    if reader.pos != len(blob):
        raise FormatError(
            f"{source}: {len(blob) - reader.pos} bytes after the last CUDA weight entry at offset {reader.pos}"
        )
    return CudaPayload(so_blob_key, tuple(weights))


def encode(payload: CudaPayload) -> bytes:
    """The bytes of ``payload``, laid out exactly as ``encode_cuda_weight_metadata`` does."""
    out = bytearray(MAGIC)

    def string(value: str) -> None:
        data = value.encode("utf-8")
        out.extend(_LENGTH.pack(len(data)))
        out.extend(data)

    string(payload.so_blob_key)
    out.extend(_LENGTH.pack(len(payload.weights)))
    for w in payload.weights:
        if len(w.sizes) != len(w.strides):
            raise ValueError(f"weight {w.fqn!r}: {len(w.sizes)} sizes but {len(w.strides)} strides")
        string(w.fqn)
        string(w.storage_key)
        out.extend(_ENTRY_FIXED.pack(w.storage_nbytes, w.dtype, w.device_type, w.storage_offset, len(w.sizes)))
        out.extend(struct.pack(f"<{len(w.sizes)}q", *w.sizes))
        out.extend(struct.pack(f"<{len(w.strides)}q", *w.strides))
    return bytes(out)


class _Reader:
    def __init__(self, blob: bytes, source: str, pos: int) -> None:
        self.blob = blob
        self.source = source
        self.pos = pos

    def unpack(self, fmt: struct.Struct, what: str) -> tuple[Any, ...]:
        try:
            values = fmt.unpack_from(self.blob, self.pos)
        except struct.error:
            raise FormatError(
                f"{self.source}: truncated CUDA weight payload: {what} at offset {self.pos} "
                f"needs {fmt.size} bytes, {max(0, len(self.blob) - self.pos)} left"
            ) from None
        self.pos += fmt.size
        return values

    def string(self, what: str) -> str:
        (length,) = self.unpack(_LENGTH, f"{what} length")
        start = self.pos
        if start + length > len(self.blob):
            raise FormatError(
                f"{self.source}: truncated CUDA weight payload: {what} at offset {start} "
                f"needs {length} bytes, {len(self.blob) - start} left"
            )
        self.pos += length
        try:
            return bytes(self.blob[start : self.pos]).decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError(f"{self.source}: {what} at offset {start} is not UTF-8") from None

    def dims(self, ndim: int, what: str) -> tuple[int, ...]:
        return tuple(self.unpack(_DIM, f"{what}[{i}]")[0] for i in range(ndim))


class CudaReader(PayloadReader):
    """The CUDA delegate's payloads (:mod:`ptebuild.runtime.payloads`): the keys of the compiled
    ``.so`` and of every weight's storage."""

    delegate_id = BACKEND_ID
    name = "CUDA"

    def keys(self, payload: DelegatePayload) -> frozenset[str]:
        return decode(payload.whole(), payload.where).keys

    def is_code(self, key: str) -> bool:
        """The compiled AOTInductor library (``<sha256>_so_blob``)."""
        return key.endswith(SO_BLOB_SUFFIX)

    def describe(self, payload: DelegatePayload) -> PayloadInfo:
        blob = payload.whole()
        if not is_cuda_payload(blob):
            return PayloadInfo()
        return PayloadInfo(tuple(sorted(decode(blob, payload.where).keys)))

    def weights_bytes(self, payload: DelegatePayload) -> int:
        return 0  # every weight's storage is named data (the .ptd); the payload holds their layout


READERS: tuple[PayloadReader, ...] = (CudaReader(),)
"""What this module reads: :data:`ptebuild.runtime.payloads.READER_MODULES` takes it, and the
backend declares it (``Backend.payload_readers``)."""
