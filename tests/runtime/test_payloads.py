"""Payload readers found by delegate id (ptebuild.runtime.payload_lookup): every delegate id a backend declares has
its reader; an id none declares is opaque; what a reader says reaches inspect, the loader and the
operator lists."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ptebuild.backends import backend_names, get_backend
from ptebuild.errors import FormatError
from ptebuild.runtime import oplist, payload_lookup
from ptebuild.runtime.file_region import Blob
from ptebuild.runtime.payload_lookup import reader_for
from ptebuild.runtime.payloads import DelegatePayload, PayloadInfo, PayloadReader


def test_every_declared_delegate_id_has_its_backends_reader():
    declared = {reader.delegate_id: reader for name in backend_names() for reader in get_backend(name).payload_readers}
    assert {"XnnpackBackend", "CudaBackend", "OpenvinoBackend", "CoreMLBackend", "VulkanBackend"} <= set(declared)
    for delegate_id, reader in declared.items():
        assert reader_for(delegate_id) is reader
    assert payload_lookup.readers() == declared
    assert reader_for("NoSuchBackend") is None and payload_lookup.problems() == []


def test_finding_a_reader_imports_no_torch_nor_pydantic():
    code = ("import sys; from ptebuild.runtime.payload_lookup import readers; readers(); "
            "print(sorted(m for m in ('torch', 'executorch', 'pydantic') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def payload_of(data: bytes) -> DelegatePayload:
    return DelegatePayload("Mine", "forward", 0, "m.pte: method 'forward' delegate 0 (Mine)",
                           Blob.of_bytes(data, "m.pte: method 'forward' delegate 0 (Mine)"), lambda key: None)


def test_a_reader_says_only_what_it_overrides():
    reader = PayloadReader("Mine")
    payload = payload_of(b"\x00" * 10)
    assert (reader.delegate_id, reader.name) == ("Mine", "Mine")
    assert reader.keys(payload) is None and reader.describe(payload) == PayloadInfo()
    assert reader.operators(payload) is None and reader.weights_bytes(payload) is None and reader.key_sha256("k") is None

    class Keys(PayloadReader):
        delegate_id = "Keyed"
        name = "keyed"

        def keys(self, payload: DelegatePayload) -> frozenset[str]:
            return frozenset({"b", "a"})

    assert Keys().describe(payload) == PayloadInfo(("a", "b"))


def test_payload_reads_are_bounded():
    payload = payload_of(b"0123456789")
    assert (payload.size, payload.head(4), payload.head(99), payload.read(2, 3, "x")) == (10, b"0123", b"0123456789", b"234")
    with pytest.raises(FormatError, match=r"^m\.pte: method 'forward' delegate 0 \(Mine\): truncated or corrupt: x \[8, 12\)"):
        payload.read(8, 4, "x")


def test_delegates_and_delegated_operators_of_a_program(programs):
    [facts] = oplist.delegates(programs.xinline.pte)
    assert (facts.method, facts.index, facts.delegate_id, facts.known) == ("forward", 0, "XnnpackBackend", True)
    assert facts.payload_bytes > 0 and facts.operators
    assert oplist.delegated_operators(programs.xinline.pte) == {"XnnpackBackend": dict(sorted(facts.operators.items()))}
    assert oplist.delegates(programs.a.pte) == [] and oplist.delegated_operators(programs.a.pte) == {}
