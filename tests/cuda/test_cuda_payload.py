"""The CUDA delegate payload (``ETCUDAFQN3``) against the toolchain and the CUDA backend: the writer
writes what executorch's ``encode_cuda_weight_metadata`` writes, and the backend's delegate listing
reads the committed program. The format itself (round trip, cuts, bad headers): the reader's own
tests, ``tests/runtime/payload_readers/test_cuda.py``."""

from __future__ import annotations

from pathlib import Path

from helpers import require_module

from ptebuild.backends.cuda.delegates import read_cuda_delegates, read_pte_named_data
from ptebuild.runtime.payload_readers import cuda as cuda_payload
from ptebuild.runtime.payload_readers.cuda import CudaPayload, CudaWeight, encode

DATA = Path(__file__).resolve().parent / "data"

SAMPLE = CudaPayload(
    so_blob_key="ab" * 32 + "_so_blob",
    weights=(
        CudaWeight("l.weight", "cuda_fqn_weight:cuda:l.weight", 2048, 6, 1, 0, (32, 16), (16, 1)),
        CudaWeight("l.bias", "cuda_fqn_weight:cuda:l.bias", 128, 6, 1, 0, (32,), (1,)),
        CudaWeight("scalar", "cuda_fqn_weight:cpu:scalar", 8, 4, 0, 0, (), ()),
        CudaWeight("ü", "k", 16, 15, 1, 3, (1, 2, 1), (2, 1, 1)),
    ),
)


def test_writes_what_executorch_writes():
    """Byte for byte the layout of executorch 1.5.1's ``encode_cuda_weight_metadata``."""
    collector = require_module("executorch.backends.cuda.cuda_weight_collector", "part of executorch 1.5.1")
    entries = [
        collector.CudaWeightEntry(
            fqn=w.fqn, storage_key=w.storage_key, storage_nbytes=w.storage_nbytes, dtype=w.dtype,
            device_type=w.device_type, storage_offset=w.storage_offset, sizes=w.sizes, strides=w.strides,
        )
        for w in SAMPLE.weights
    ]
    assert encode(SAMPLE) == collector.encode_cuda_weight_metadata(SAMPLE.so_blob_key, entries)
    assert cuda_payload.MAGIC == collector.CUDA_WEIGHT_CACHE_MAGIC


def test_reads_the_committed_program():
    (delegate,) = read_cuda_delegates(DATA / "tiny_cuda_a.pte")
    assert (delegate.method, delegate.index) == ("forward", 0)
    payload = delegate.payload
    assert payload.so_blob_key.endswith("_so_blob")
    assert {w.fqn for w in payload.weights} == {"model.hidden.weight", "model.hidden.bias", "model.out.weight"}
    hidden = next(w for w in payload.weights if w.fqn == "model.hidden.weight")
    assert (hidden.sizes, hidden.strides, hidden.dtype, hidden.storage_nbytes) == ((16, 8), (8, 1), 6, 512)
    # The payload as it lies in the file is what the writer writes.
    assert encode(payload) in (DATA / "tiny_cuda_a.pte").read_bytes()
    assert read_pte_named_data(DATA / "tiny_cuda_a.pte", payload.so_blob_key)[:4] == b"\x7fELF"
