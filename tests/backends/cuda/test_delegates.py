"""The CUDA backend's delegate listing reads the committed program: each delegate's payload (the
weights' storage keys, the compiled library's key) and the library itself from the named data."""

from __future__ import annotations

from pathlib import Path

from ptebuild.backends.cuda.delegates import read_cuda_delegates, read_pte_named_data
from ptebuild.runtime.payload_readers.cuda import encode

DATA = Path(__file__).resolve().parents[2] / "cuda" / "data"


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
