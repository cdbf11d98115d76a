"""The CUDA delegate payload (``ETCUDAFQN3``): reader, writer, and every way a payload can be cut."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from helpers import require_module

from ptebuild.backends.cuda.delegates import read_cuda_delegates, read_pte_named_data
from ptebuild.errors import FormatError
from ptebuild.runtime.payload_readers import cuda as cuda_payload
from ptebuild.runtime.payload_readers.cuda import CudaPayload, CudaWeight, decode, encode

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


def test_round_trip():
    assert decode(encode(SAMPLE), "sample") == SAMPLE


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


def test_every_truncation_is_a_format_error():
    blob = encode(SAMPLE)
    for length in range(len(blob)):
        with pytest.raises(FormatError, match=r"^sample: (truncated|not a CUDA)"):
            decode(blob[:length], "sample")


@pytest.mark.parametrize(
    "blob, message",
    [
        (b"", r"not a CUDA weight payload: starts with b'', expected b'ETCUDAFQN3'"),
        (b"ETCUDAFQN2" + bytes(8), r"not a CUDA weight payload: starts with b'ETCUDAFQN2'"),
        (b"XH00" + bytes(40), r"not a CUDA weight payload"),
        (b"ETCUDAFQN3" + struct.pack("<I", 100) + b"x", r"truncated CUDA weight payload: so_blob_key at offset 14 needs 100 bytes, 1 left"),
        (b"ETCUDAFQN3" + struct.pack("<I", 1) + b"\xff" + struct.pack("<I", 0), r"so_blob_key at offset 14 is not UTF-8"),
        (encode(CudaPayload("k", ())) + b"\0", r"1 bytes after the last CUDA weight entry at offset 19"),
    ],
    ids=["empty", "old-magic", "xnnpack", "long-string", "not-utf8", "trailing"],
)
def test_bad_headers(blob, message):
    with pytest.raises(FormatError, match=message):
        decode(blob, "sample")


def test_too_many_dims():
    weight = CudaWeight("w", "k", 8, 6, 1, 0, (1,) * 65, (1,) * 65)
    with pytest.raises(FormatError, match=r"entry 0 \('w'\) has 65 dims at offset \d+, limit 64"):
        decode(encode(CudaPayload("k", (weight,))), "sample")


def test_with_keys_renames_storage_keys_only():
    renamed = SAMPLE.with_keys({w.storage_key: w.storage_key + "@x" for w in SAMPLE.weights})
    assert [w.storage_key for w in renamed.weights] == [w.storage_key + "@x" for w in SAMPLE.weights]
    assert renamed.so_blob_key == SAMPLE.so_blob_key
    with pytest.raises(KeyError):
        SAMPLE.with_keys({})


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
