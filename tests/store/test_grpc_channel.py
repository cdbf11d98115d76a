"""The gRPC tier's transport (ptebuild.store.grpc_channel.Rpc) against a real BuildGrid, and the
fault-injecting gRPC proxy in front of it (``tests/remote/cache_fixtures.py``).

What it is held to: every failed call is a fixed phrase (from real refusals, unknown hosts, TLS
spoken to a plain port, deadlines and status codes; grpc's own text never shows), with the right
verdict (retried, a miss, refused credentials); ``NOT_FOUND`` is a miss; the server's
capabilities are asked once and bound the batches; ByteStream streams a blob in 1 MiB messages
both ways, and a read cut mid-stream says so with what came; a call after the connection was lost
opens a new channel at once; metadata travels with every call. The tier built on it:
``test_grpc.py`` and ``test_remote.py``.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest
from helpers import require_module

from ptebuild.errors import UsageError
from ptebuild.store import reapi
from ptebuild.store.faults import Fault
from ptebuild.store.grpc_channel import CHUNK, MAX_BATCH, Rpc, chunks, describe, status_fault
from ptebuild.store.reapi import Digest

grpc = require_module("grpc", "pip install 'ptebuild[grpc]' (./bootstrap.sh --test installs it)")

NOT_THERE = reapi.get_action_result_request("", Digest.of(b"an action nobody ran"))
"""A GetActionResult request of an action no server has a result for."""


def rpc(target: str, warnings: list[str] | None = None, *, secure: bool = False, metadata=(), **tuning) -> Rpc:
    """A transport with short timeouts (those of ``http_helpers.grpc_tier``)."""
    tuning = {"timeout": 2.0, "retries": 2, "max_failures": 3, "backoff": 0.01, **tuning}
    return Rpc(target, secure, "", tuple(metadata), name=f"remote cache grpc://{target}",
               warn=(warnings.append if warnings is not None else lambda s: None), **tuning)


def fault_of(call) -> Fault:
    with pytest.raises(Fault) as raised:
        call()
    return raised.value


def methods(proxy) -> list[str]:
    """The methods the proxy saw, by their short name."""
    return [method.rsplit("/", 1)[1] for method, _, _ in proxy.log()]


# -- how a fault is said -------------------------------------------------------------------------


class Failed(grpc.RpcError):
    """A failed call's error as grpc raises it: a status code and its details."""

    def __init__(self, code: str, details: str = "") -> None:
        self._code, self._details = getattr(grpc.StatusCode, code), details

    def code(self):
        return self._code

    def details(self) -> str:
        return self._details


FAULTS = [
    ("DEADLINE_EXCEEDED", "Deadline Exceeded", "no answer within 1.5 s", True, False),
    ("UNAVAILABLE", "failed to connect to all addresses; last error: Connection refused", "connection refused", True, False),
    ("UNAVAILABLE", "recvmsg:Connection reset by peer", "connection reset", True, False),
    ("UNAVAILABLE", "DNS resolution failed for cache.example:443", "host name not found", True, False),
    ("UNAVAILABLE", "Name or service not known", "host name not found", True, False),
    ("UNAVAILABLE", "Ssl handshake failed: SSL_ERROR_SSL", "TLS error", True, False),
    ("UNAVAILABLE", "Socket closed", "server closed the connection", True, False),
    ("UNAVAILABLE", "GOAWAY received", "server closed the connection", True, False),
    ("UNAVAILABLE", "", "server unavailable (gRPC UNAVAILABLE)", True, False),
    ("RESOURCE_EXHAUSTED", "", "gRPC RESOURCE_EXHAUSTED", True, False),
    ("ABORTED", "", "gRPC ABORTED", True, False),
    ("INTERNAL", "", "gRPC INTERNAL", True, False),
    ("UNKNOWN", "token tok-5e3c7a91 for http://user:pw@host", "gRPC UNKNOWN", True, False),
    ("UNAUTHENTICATED", "", "gRPC UNAUTHENTICATED", False, True),
    ("PERMISSION_DENIED", "", "gRPC PERMISSION_DENIED", False, True),
    ("INVALID_ARGUMENT", "digest mismatch", "gRPC INVALID_ARGUMENT", False, False),
    ("FAILED_PRECONDITION", "", "gRPC FAILED_PRECONDITION", False, False),
]
"""(status code, grpc's details, the phrase said, retried, refused credentials)."""


@pytest.mark.parametrize(("code", "details", "why", "transient", "auth"), FAULTS,
                         ids=[f"{code.lower()}: {why}" for code, _, why, _, _ in FAULTS])
def test_a_fault_is_a_fixed_phrase_and_a_verdict(code, details, why, transient, auth):
    fault = describe(Failed(code, details), 1.5)
    assert (fault.why, fault.transient, fault.auth) == (why, transient, auth)
    assert fault.status == getattr(grpc.StatusCode, code).value[0]


def test_an_error_without_a_status_is_unknown():
    fault = describe(RuntimeError("boom"), 2.0)
    assert (fault.why, fault.transient, fault.status, fault.auth) == ("gRPC UNKNOWN", True, None, False)


@pytest.mark.parametrize(("code", "why", "transient", "auth"), [
    (5, "gRPC NOT_FOUND", False, False),
    (14, "gRPC UNAVAILABLE", True, False),
    (8, "gRPC RESOURCE_EXHAUSTED", True, False),
    (16, "gRPC UNAUTHENTICATED", False, True),
    (3, "gRPC INVALID_ARGUMENT", False, False),
    (99, "gRPC status 99", False, False),
])
def test_a_blobs_status_in_a_batch_answer(code, why, transient, auth):
    fault = status_fault(reapi.Status(code, "whatever the server says"))
    assert (fault.why, fault.transient, fault.status, fault.auth) == (why, transient, code, auth)


# -- real faults ---------------------------------------------------------------------------------


def test_nothing_listening(closed_port):
    fault = fault_of(lambda: rpc(f"127.0.0.1:{closed_port}").unary(reapi.GET_ACTION_RESULT, NOT_THERE))
    assert (fault.why, fault.transient, fault.status) == ("connection refused", True, 14)


def test_a_host_that_does_not_exist():
    fault = fault_of(lambda: rpc("cache.invalid:8980").unary(reapi.GET_ACTION_RESULT, NOT_THERE))
    assert (fault.why, fault.transient) == ("host name not found", True)


def test_tls_spoken_to_a_plain_port(buildgrid):
    fault = fault_of(lambda: rpc(buildgrid.target, secure=True).unary(reapi.GET_ACTION_RESULT, NOT_THERE))
    assert (fault.why, fault.transient) == ("TLS error", True)


def test_no_answer_within_the_deadline(grpc_proxy):
    grpc_proxy.fault("slow", delay=1.5, match="GetActionResult")
    fault = fault_of(lambda: rpc(f"127.0.0.1:{grpc_proxy.port}", timeout=0.5).unary(reapi.GET_ACTION_RESULT, NOT_THERE))
    assert (fault.why, fault.transient, fault.status) == ("no answer within 0.5 s", True, 4)


def test_a_status_the_server_answers(grpc_proxy):
    t = rpc(f"127.0.0.1:{grpc_proxy.port}")
    grpc_proxy.fault("status", code="PERMISSION_DENIED", match="GetActionResult")
    fault = fault_of(lambda: t.unary(reapi.GET_ACTION_RESULT, NOT_THERE))
    assert (fault.why, fault.transient, fault.auth) == ("gRPC PERMISSION_DENIED", False, True)
    assert "injected fault" not in str(fault)  # the server's details are not repeated


def test_not_found_is_a_miss(buildgrid):
    assert rpc(buildgrid.target).unary(reapi.GET_ACTION_RESULT, NOT_THERE) is None


def test_a_lost_connection_is_replaced_at_once(buildgrid, grpc_proxy):
    """After UNAVAILABLE the next call opens a new channel: it reaches a server that came back,
    where grpc's channel would refuse calls while it backs off."""
    t = rpc(f"127.0.0.1:{grpc_proxy.port}", timeout=1.0)
    assert t.unary(reapi.GET_ACTION_RESULT, NOT_THERE) is None
    grpc_proxy.fault("refuse")
    for _ in range(3):
        assert fault_of(lambda: t.unary(reapi.GET_ACTION_RESULT, NOT_THERE)).why == "connection refused"
    grpc_proxy.reset()
    assert t.unary(reapi.GET_ACTION_RESULT, NOT_THERE) is None  # the first call after it: no waiting, no retry
    t.close()
    assert t.unary(reapi.GET_ACTION_RESULT, NOT_THERE) is None  # a closed transport opens a channel again


def test_metadata_travels_with_every_call(grpc_proxy):
    t = rpc(f"127.0.0.1:{grpc_proxy.port}", metadata=[("x-token", "tok-5e3c7a91"), ("authorization", "Basic eDp5")])
    t.unary(reapi.GET_ACTION_RESULT, NOT_THERE)
    t.capabilities()
    calls = grpc_proxy.log()
    assert [m.rsplit("/", 1)[1] for m, _, _ in calls] == ["GetActionResult", "GetCapabilities"]
    for _, metadata, _ in calls:
        assert (metadata["x-token"], metadata["authorization"]) == ("tok-5e3c7a91", "Basic eDp5")
        assert metadata["user-agent"].startswith("ptebuild ")


def test_without_grpcio_a_grpc_url_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "grpc", None)  # `import grpc` fails as if it were not installed
    with pytest.raises(UsageError) as raised:
        rpc("127.0.0.1:1")
    assert str(raised.value) == "--remote-cache grpc://: needs grpcio: pip install 'ptebuild[grpc]'"


# -- capabilities and batches --------------------------------------------------------------------


def test_capabilities_are_asked_once_and_bound_the_batches(grpc_proxy):
    t = rpc(f"127.0.0.1:{grpc_proxy.port}")
    caps = t.capabilities()
    assert reapi.SHA256 in caps.digest_functions and caps.update_enabled
    assert 0 < caps.max_batch_total_size_bytes
    assert t.batch_limit() == min(caps.max_batch_total_size_bytes, MAX_BATCH) - 1024
    assert t.capabilities() is caps
    assert methods(grpc_proxy) == ["GetCapabilities"]


def test_a_server_without_capabilities_gets_the_defaults(grpc_proxy):
    grpc_proxy.fault("status", code="UNIMPLEMENTED", match="GetCapabilities")
    warnings: list[str] = []
    t = rpc(f"127.0.0.1:{grpc_proxy.port}", warnings)
    assert t.capabilities() == reapi.CacheCapabilities((reapi.SHA256,), True, 0)
    assert t.batch_limit() == MAX_BATCH - 1024
    assert warnings == [] and t.stats()["errors"] == 0 and not t.stats()["disabled"]


def test_capabilities_that_cannot_be_had_are_assumed_after_one_warning(grpc_proxy):
    grpc_proxy.fault("status", code="INTERNAL", match="GetCapabilities")
    warnings: list[str] = []
    t = rpc(f"127.0.0.1:{grpc_proxy.port}", warnings, retries=1, max_failures=5)
    assert t.capabilities() == reapi.CacheCapabilities((reapi.SHA256,), True, 0)
    assert warnings == [f'remote cache grpc://127.0.0.1:{grpc_proxy.port}: GetCapabilities "": gRPC INTERNAL; treated as a miss']
    assert methods(grpc_proxy) == ["GetCapabilities", "GetCapabilities"]  # one retry, then not asked again
    t.capabilities()
    assert len(grpc_proxy.log()) == 2


# -- ByteStream ----------------------------------------------------------------------------------


def test_deadlines_grow_with_the_bytes_carried():
    t = rpc("127.0.0.1:1", timeout=3.0)
    assert [t.deadline(n) for n in (0, 1, CHUNK, CHUNK + 1, 10 * CHUNK)] == [3.0, 3.0, 3.0, 6.0, 30.0]


def test_chunks_of_bytes_and_of_a_file(tmp_path):
    data = os.urandom(2 * CHUNK + 5)
    (tmp_path / "blob").write_bytes(data)
    for source in (data, tmp_path / "blob"):
        assert [len(c) for c in chunks(source)] == [CHUNK, CHUNK, 5]
        assert b"".join(chunks(source)) == data
    (tmp_path / "empty").write_bytes(b"")
    assert list(chunks(b"")) == [] == list(chunks(tmp_path / "empty"))


@pytest.mark.parametrize("kind", ["bytes", "file"])
def test_bytestream_round_trip(buildgrid, tmp_path, kind):
    data = os.urandom(2 * CHUNK + 12345)
    digest = Digest.of(data)
    (tmp_path / "blob").write_bytes(data)
    t = rpc(buildgrid.target)
    t.write(digest, data if kind == "bytes" else Path(tmp_path / "blob"))
    received = bytearray()
    assert t.read(digest, received.extend) == (True, digest.hash, digest.size, "")
    assert received == data


def test_a_blob_the_server_lacks_reads_as_absent(buildgrid):
    received = bytearray()
    assert rpc(buildgrid.target).read(Digest.of(os.urandom(64)), received.extend) == (False, "", 0, "")
    assert received == b""


def test_a_write_the_server_refuses(buildgrid):
    data = os.urandom(1000)
    wrong = Digest(hashlib.sha256(b"other bytes").hexdigest(), len(data))
    fault = fault_of(lambda: rpc(buildgrid.target).write(wrong, data))
    assert (fault.why, fault.transient) == ("gRPC INVALID_ARGUMENT", False)  # the server checks the hash


def test_a_read_cut_mid_stream_says_why_with_what_came(buildgrid, grpc_proxy):
    data = os.urandom(3 * CHUNK)
    digest = Digest.of(data)
    rpc(buildgrid.target).write(digest, data)
    grpc_proxy.fault("truncate", match="ByteStream/Read")
    received = bytearray()
    found, _, _, why = rpc(f"127.0.0.1:{grpc_proxy.port}").read(digest, received.extend)
    assert (found, why) == (True, "server unavailable (gRPC UNAVAILABLE)")
    assert 0 < len(received) < len(data) and bytes(received) == data[:len(received)]  # the bytes so far were passed on


def test_a_read_refused_before_any_byte_raises(buildgrid, grpc_proxy):
    data = os.urandom(1000)
    digest = Digest.of(data)
    rpc(buildgrid.target).write(digest, data)
    grpc_proxy.fault("status", code="UNAVAILABLE", match="ByteStream/Read")
    fault = fault_of(lambda: rpc(f"127.0.0.1:{grpc_proxy.port}").read(digest, bytearray().extend))
    assert (fault.why, fault.transient) == ("server unavailable (gRPC UNAVAILABLE)", True)
