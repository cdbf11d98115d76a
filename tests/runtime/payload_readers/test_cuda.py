"""The CUDA delegate payload (ptebuild.runtime.payload_readers.cuda, ``ETCUDAFQN3``): the writer
and the reader round-trip, every way a payload can be cut or malformed is a FormatError naming the
field and its offset, storage keys are renamed alone, and the reader its backend declares lists
the keys of the committed program's delegate (``tests/cuda/data``): its ``.so`` and its ``.ptd``'s
weights, and the writer writes what executorch's ``encode_cuda_weight_metadata`` writes, byte for
byte. (The CUDA backend's delegate listing: ``tests/backends/cuda/test_delegates.py``.)"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from helpers import require_module

from ptebuild.errors import FormatError
from ptebuild.runtime.file_region import Blob
from ptebuild.runtime.payload_lookup import reader_for
from ptebuild.runtime.payload_readers.cuda import (
    BACKEND_ID,
    MAGIC,
    CudaPayload,
    CudaReader,
    CudaWeight,
    decode,
    encode,
    is_cuda_payload,
)
from ptebuild.runtime.payloads import DelegatePayload
from ptebuild.runtime.ptd_file import read_ptd
from ptebuild.runtime.pte_file import open_pte

DATA = Path(__file__).resolve().parents[2] / "cuda" / "data"

SAMPLE = CudaPayload(
    so_blob_key="ab" * 32 + "_so_blob",
    weights=(
        CudaWeight("l.weight", "cuda_fqn_weight:cuda:l.weight", 2048, 6, 1, 0, (32, 16), (16, 1)),
        CudaWeight("l.bias", "cuda_fqn_weight:cuda:l.bias", 128, 6, 1, 0, (32,), (1,)),
        CudaWeight("scalar", "cuda_fqn_weight:cpu:scalar", 8, 4, 0, 0, (), ()),
        CudaWeight("ü", "k", 16, 15, 1, 3, (1, 2, 1), (2, 1, 1)),
    ),
)


# -- the format -------------------------------------------------------------------------------


def test_round_trip():
    assert decode(encode(SAMPLE), "sample") == SAMPLE


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


# -- the layout and the keys --------------------------------------------------------------------


def test_the_layout_of_one_entry():
    """The module docstring's table, field by field."""
    weight = CudaWeight("f", "sk", 24, 6, 1, 2, (2, 3), (3, 1))
    assert encode(CudaPayload("so", (weight,))) == (
        MAGIC + struct.pack("<I", 2) + b"so" + struct.pack("<I", 1)
        + struct.pack("<I", 1) + b"f" + struct.pack("<I", 2) + b"sk"
        + struct.pack("<QiiqI", 24, 6, 1, 2, 2) + struct.pack("<2q", 2, 3) + struct.pack("<2q", 3, 1)
    )


def test_sizes_and_strides_must_pair():
    with pytest.raises(ValueError, match=r"^weight 'w': 2 sizes but 1 strides$"):
        encode(CudaPayload("k", (CudaWeight("w", "k", 8, 6, 1, 0, (1, 2), (1,)),)))


def test_the_keys_are_the_so_and_each_storage():
    assert SAMPLE.keys == frozenset({SAMPLE.so_blob_key, *(w.storage_key for w in SAMPLE.weights)})
    assert CudaPayload("so", ()).keys == frozenset({"so"})


def test_is_cuda_payload():
    assert is_cuda_payload(encode(SAMPLE)) and not is_cuda_payload(b"ETCUDAFQN2" + bytes(8)) and not is_cuda_payload(b"")


# -- the reader, on the committed program -------------------------------------------------------


def payload_of(blob: bytes) -> DelegatePayload:
    return DelegatePayload(BACKEND_ID, "forward", 0, "x.pte: method 'forward' delegate 0 (CudaBackend)",
                           Blob.of_bytes(blob, "payload"), lambda key: None)


def test_the_backend_declares_the_reader():
    reader = reader_for(BACKEND_ID)
    assert isinstance(reader, CudaReader) and (reader.delegate_id, reader.name) == ("CudaBackend", "CUDA")


def test_the_reader_lists_the_keys_of_the_committed_program():
    reader = CudaReader()
    with open_pte(DATA / "tiny_cuda_a.pte") as pte:
        [plan] = pte.execution_plans()
        [delegate] = plan.delegates()
        payload = pte.payload(plan.name(), delegate)
        keys = reader.keys(payload)
        info = reader.describe(payload)
        so = [key for key in keys if key.endswith("_so_blob")]
        assert len(so) == 1 and pte.named_blob(so[0]) is not None  # the .so is the .pte's own named data
        assert reader.weights_bytes(payload) == 0
    assert keys - set(so) == read_ptd(DATA / "tiny_cuda_a_weights.ptd").keys
    assert info.keys == tuple(sorted(keys)) and (info.contents, info.summary) == (None, None)


def test_the_reader_refuses_another_format_for_keys_and_describes_it_as_nothing():
    reader = CudaReader()
    other = payload_of(b"XH00" + bytes(40))
    with pytest.raises(FormatError, match=r"^x\.pte: method 'forward' delegate 0 \(CudaBackend\): not a CUDA weight payload"):
        reader.keys(other)
    assert reader.describe(other).keys is None
    with pytest.raises(FormatError, match=r"^x\.pte: method 'forward' delegate 0 \(CudaBackend\): truncated CUDA weight payload"):
        reader.describe(payload_of(encode(SAMPLE)[:-1]))


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
    assert MAGIC == collector.CUDA_WEIGHT_CACHE_MAGIC
