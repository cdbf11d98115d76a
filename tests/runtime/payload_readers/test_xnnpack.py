"""The XNNPACK payload reader: the keys, operators and weights of real delegates (the session's
exported programs), and the key forms it vouches for."""

from __future__ import annotations

import hashlib

from ptebuild.runtime.payload_readers.xnnpack import BACKEND_ID, HEADER_MAGIC, XnnpackReader, graph_bytes
from ptebuild.runtime.ptd_file import read_ptd
from ptebuild.runtime.pte_file import open_pte


def payloads(path):
    with open_pte(path) as pte:
        return [(pte.payload(plan.name(), d), pte.segments) for plan in pte.execution_plans() for d in plan.delegates()]


def test_keys_are_the_weights_in_the_ptd_and_only_the_graph_is_read(programs):
    reader = XnnpackReader()
    with open_pte(programs.xa.pte) as pte:
        [plan] = pte.execution_plans()
        [delegate] = plan.delegates()
        payload = pte.payload(plan.name(), delegate)
        assert payload.delegate_id == reader.delegate_id == BACKEND_ID
        graph = graph_bytes(payload)
        assert graph[4:8] == HEADER_MAGIC and len(graph) < payload.size  # the constant data after it is not read
        assert reader.keys(payload) == read_ptd(programs.xa.ptd).keys
        assert reader.describe(payload).keys == tuple(sorted(read_ptd(programs.xa.ptd).keys))


def test_operators_and_weights_bytes(programs):
    reader = XnnpackReader()
    with open_pte(programs.xinline.pte) as pte:
        [plan] = pte.execution_plans()
        payload = pte.payload(plan.name(), plan.delegates()[0])
        operators = reader.operators(payload)
        assert operators and operators.get("XNNFullyConnected", 0) >= 1 and all(n > 0 for n in operators.values())
        # Weights kept inside the .pte are named data, not the payload's own constant data.
        assert reader.weights_bytes(payload) == 0


def test_scale_keys_promise_the_digest_after_their_prefix():
    reader = XnnpackReader()
    digest = hashlib.sha256(b"scales").hexdigest()
    assert reader.key_sha256(f"scale_{digest}") == digest
    assert reader.key_sha256(digest) is None  # the generic form: ptebuild.runtime.keys
    assert reader.key_sha256("scale_xyz") is None and reader.key_sha256(f"bias_{digest}") is None
