"""SHA-256 storage keys: the .ptd and the delegate payload are renamed together, consistently."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from ptebuild.backends.cuda.delegates import read_cuda_delegates
from ptebuild.runtime.keys import sha256_in_key
from ptebuild.runtime.payload_readers.cuda import CudaPayload, CudaWeight, decode, encode
from ptebuild.runtime.ptd_file import read_ptd

DATA = Path(__file__).resolve().parent / "data"


def test_committed_keys_name_their_bytes():
    (delegate,) = read_cuda_delegates(DATA / "tiny_cuda_a.pte")
    ptd = read_ptd(DATA / "tiny_cuda_a_weights.ptd")
    assert {w.storage_key for w in delegate.payload.weights} == set(ptd.keys)
    for weight in delegate.payload.weights:
        assert weight.storage_key == f"cuda_fqn_weight:cuda:{weight.fqn}@sha256:{sha256_in_key(weight.storage_key)}"
        blob = ptd.read_blob(weight.storage_key)
        assert hashlib.sha256(blob).hexdigest() == sha256_in_key(weight.storage_key)
        assert len(blob) == weight.storage_nbytes


def test_same_architecture_different_weights_share_no_key():
    a = read_ptd(DATA / "tiny_cuda_a_weights.ptd").keys
    b = read_ptd(DATA / "tiny_cuda_b_weights.ptd").keys
    assert len(a) == len(b) == 3 and not a & b
    assert {k.partition("@")[0] for k in a} == {k.partition("@")[0] for k in b}


@pytest.fixture
def fake_manager(monkeypatch):
    """What ``key_cuda_weights_by_sha256`` reads of an ExecutorchProgramManager, two methods sharing a weight."""
    from executorch.exir._serialize import _serialize
    from executorch.exir._serialize._named_data_store import DataEntry, NamedDataStoreOutput
    from executorch.exir.backend.compile_spec_schema import CompileSpec
    from executorch.exir.schema import BackendDelegate, BackendDelegateDataReference, BackendDelegateInlineData, DataLocation

    shared, own = b"\x01" * 16, b"\x02" * 8
    named = NamedDataStoreOutput(
        buffers=[b"ELF", shared, own],
        pte_data={"so_a_so_blob": DataEntry(0, 1, None), "so_b_so_blob": DataEntry(0, 1, None)},
        external_data={
            "aoti_cuda_blob": {
                "cuda_fqn_weight:cuda:w": DataEntry(1, 1, None),
                "cuda_fqn_weight:cuda:b": DataEntry(2, 1, None),
            }
        },
    )

    def payload(so, keys):
        return encode(CudaPayload(so, tuple(CudaWeight(k.rpartition(":")[2], k, 16, 6, 1, 0, (4,), (1,)) for k in keys)))

    inline = [
        BackendDelegateInlineData(payload("so_a_so_blob", ["cuda_fqn_weight:cuda:w"])),
        BackendDelegateInlineData(payload("so_b_so_blob", ["cuda_fqn_weight:cuda:w", "cuda_fqn_weight:cuda:b"])),
    ]

    def delegate(index):
        specs = [CompileSpec("method_name", b"m"), CompileSpec("shim_library_path", b"/home/me/out")]
        return BackendDelegate("CudaBackend", BackendDelegateDataReference(DataLocation.INLINE, index), specs)

    program = SimpleNamespace(
        execution_plan=[SimpleNamespace(name="a", delegates=[delegate(0)]), SimpleNamespace(name="b", delegates=[delegate(1)])],
        backend_delegate_data=inline,
    )
    calls = []
    monkeypatch.setattr(_serialize, "serialize_for_executorch", lambda *args: calls.append(args) or ("pte", {"aoti_cuda_blob": "ptd"}))
    manager = SimpleNamespace(
        _named_data=named, _emitter_output=SimpleNamespace(program=program), _data_serializer=None, _buffer=b"stale"
    )
    return manager, calls, {"w": hashlib.sha256(shared).hexdigest(), "b": hashlib.sha256(own).hexdigest()}


def test_rewrite_renames_both_sides_consistently(fake_manager):
    from ptebuild.backends.cuda.weightkeys import key_cuda_weights_by_sha256

    manager, calls, digests = fake_manager
    renamed = key_cuda_weights_by_sha256(manager, config="config")
    expected = {f"cuda_fqn_weight:cuda:{n}": f"cuda_fqn_weight:cuda:{n}@sha256:{d}" for n, d in digests.items()}
    assert renamed == expected
    assert set(manager._named_data.external_data["aoti_cuda_blob"]) == set(expected.values())
    program = manager._emitter_output.program
    a, b = (decode(d.data, "payload") for d in program.backend_delegate_data)
    assert [w.storage_key for w in a.weights] == [expected["cuda_fqn_weight:cuda:w"]]
    assert [w.storage_key for w in b.weights] == [expected["cuda_fqn_weight:cuda:w"], expected["cuda_fqn_weight:cuda:b"]]
    assert (a.so_blob_key, b.so_blob_key) == ("so_a_so_blob", "so_b_so_blob")
    # No absolute path of the building machine stays in the .pte; the method name does.
    for plan in program.execution_plan:
        assert [s.key for s in plan.delegates[0].compile_specs] == ["method_name"]
    assert len(calls) == 1 and calls[0][1] == "config"
    assert (manager._pte_data, manager._buffer) == ("pte", None)


def test_rewrite_twice_changes_nothing(fake_manager):
    from ptebuild.backends.cuda.weightkeys import key_cuda_weights_by_sha256

    manager, _, _ = fake_manager
    first = key_cuda_weights_by_sha256(manager, config=None)
    data = [d.data for d in manager._emitter_output.program.backend_delegate_data]
    second = key_cuda_weights_by_sha256(manager, config=None)
    assert set(second.values()) == set(first.values())
    assert [d.data for d in manager._emitter_output.program.backend_delegate_data] == data


def test_payload_key_missing_from_named_data_is_refused(fake_manager):
    from ptebuild.backends.cuda.weightkeys import key_cuda_weights_by_sha256
    from ptebuild.errors import BuildError

    manager, _, _ = fake_manager
    del manager._named_data.external_data["aoti_cuda_blob"]["cuda_fqn_weight:cuda:b"]
    with pytest.raises(BuildError, match=r"method 'b' CUDA delegate 0: weight 'b' key 'cuda_fqn_weight:cuda:b' is in no named data"):
        key_cuda_weights_by_sha256(manager, config=None)
