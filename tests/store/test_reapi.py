"""REAPI messages encoded by hand (ptebuild.store.reapi), checked with the real protobuf library
against the REAPI schema both ways, and every truncation and a table of bad messages."""

from __future__ import annotations

import base64

import pytest
from reapi_schema import V2, protobuf

from ptebuild.errors import FormatError
from ptebuild.store import reapi
from ptebuild.store.reapi import ActionResult, Digest, OutputFile

A = Digest("a" * 64, 1000)
B = Digest("b" * 64, 0)
C = Digest("c" * 64, 5_000_000_000)
RESULT = ActionResult((OutputFile("policy.pte", A), OutputFile("empty.ptd", B, is_executable=True),
                       OutputFile(".ptebuild/entry.json", C)), exit_code=-3)


def digest_dict(d: Digest) -> dict:
    return {"hash": d.hash, **({"size_bytes": str(d.size)} if d.size else {})}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


OURS = [
    ("ActionResult", RESULT.encode(), {
        "output_files": [{"path": "policy.pte", "digest": digest_dict(A)},
                         {"path": "empty.ptd", "digest": {"hash": B.hash}, "is_executable": True},
                         {"path": ".ptebuild/entry.json", "digest": digest_dict(C)}],
        "exit_code": -3}),
    ("ActionResult", ActionResult().encode(), {}),
    ("GetActionResultRequest", reapi.get_action_result_request("", A),
     {"action_digest": digest_dict(A), "digest_function": "SHA256"}),
    ("UpdateActionResultRequest", reapi.update_action_result_request("main/ci", A, ActionResult((OutputFile("x", C),))),
     {"instance_name": "main/ci", "action_digest": digest_dict(A),
      "action_result": {"output_files": [{"path": "x", "digest": digest_dict(C)}]}, "digest_function": "SHA256"}),
    ("FindMissingBlobsRequest", reapi.find_missing_blobs_request("i", [A, B]),
     {"instance_name": "i", "blob_digests": [digest_dict(A), {"hash": B.hash}], "digest_function": "SHA256"}),
    ("BatchUpdateBlobsRequest", reapi.batch_update_blobs_request("", [(A, b"\x00\xffdata"), (B, b"")]),
     {"requests": [{"digest": digest_dict(A), "data": b64(b"\x00\xffdata")}, {"digest": {"hash": B.hash}}],
      "digest_function": "SHA256"}),
    ("BatchReadBlobsRequest", reapi.batch_read_blobs_request("", [C]),
     {"digests": [digest_dict(C)], "digest_function": "SHA256"}),
    ("GetCapabilitiesRequest", reapi.get_capabilities_request("main"), {"instance_name": "main"}),
    ("google.bytestream.ReadRequest", reapi.read_request(reapi.read_resource("", A)),
     {"resource_name": f"blobs/{A.hash}/1000"}),
    ("google.bytestream.ReadRequest", reapi.read_request(reapi.read_resource("main", A), 7),
     {"resource_name": f"main/blobs/{A.hash}/1000", "read_offset": "7"}),
    ("google.bytestream.WriteRequest", reapi.write_request(reapi.write_resource("main", "u-1", C), 0, b"abc", False),
     {"resource_name": f"main/uploads/u-1/blobs/{C.hash}/5000000000", "data": b64(b"abc")}),
    ("google.bytestream.WriteRequest", reapi.write_request("", 1 << 20, b"z", True),
     {"write_offset": str(1 << 20), "finish_write": True, "data": b64(b"z")}),
]


def test_what_ptebuild_encodes_is_what_protobuf_reads_and_writes_byte_for_byte():
    answers = protobuf([{"type": t if "." in t else V2 + t, "hex": data.hex()} for t, data, _ in OURS])
    for (type_name, _, expected), answer in zip(OURS, answers):
        assert answer["dict"] == expected, type_name
        assert answer["same_bytes"] and answer["unknown_fields"] == 0, type_name  # protoc's field order and defaults


def test_what_protobuf_encodes_ptebuild_reads():
    """Servers send fields ptebuild does not use (bazel-remote adds execution_metadata): skipped."""
    messages = [
        (V2 + "ActionResult", {
            "output_files": [{"path": "policy.pte", "digest": digest_dict(A), "contents": b64(b"inline"),
                              "node_properties": {"properties": [{"name": "n", "value": "v"}]}},
                             {"path": ".ptebuild/entry.json", "digest": digest_dict(C), "is_executable": True}],
            "output_directories": [{"path": "d", "tree_digest": digest_dict(A)}],
            "output_symlinks": [{"path": "l", "target": "policy.pte"}],
            "exit_code": -1, "stdout_raw": b64(b"out"), "stderr_digest": digest_dict(B),
            "execution_metadata": {"worker": "bazel-remote", "queued_timestamp": "2026-01-01T00:00:00Z",
                                   "auxiliary_metadata": [{"@type": "type.googleapis.com/google.rpc.Status", "code": 3}]},
        }),
        (V2 + "FindMissingBlobsResponse", {"missing_blob_digests": [digest_dict(A), {"hash": B.hash}]}),
        (V2 + "BatchReadBlobsResponse", {"responses": [
            {"digest": digest_dict(A), "data": b64(b"x" * 1000), "status": {}},
            {"digest": digest_dict(C), "status": {"code": 5, "message": "missing"}, "compressor": "IDENTITY"}]}),
        (V2 + "BatchUpdateBlobsResponse", {"responses": [
            {"digest": digest_dict(A), "status": {"code": 3, "message": "Data does not match hash"}},
            {"digest": {"hash": B.hash}, "status": {}}]}),
        (V2 + "ServerCapabilities", {
            "cache_capabilities": {"digest_functions": ["SHA256", "SHA1"],
                                   "action_cache_update_capabilities": {"update_enabled": True},
                                   "max_batch_total_size_bytes": "4193280",
                                   "symlink_absolute_path_strategy": "DISALLOWED", "supported_compressors": ["ZSTD"]},
            "low_api_version": {"major": 2}, "high_api_version": {"major": 2, "minor": 2}}),
        (V2 + "ServerCapabilities", {}),
        ("google.bytestream.ReadResponse", {"data": b64(b"chunk")}),
        ("google.bytestream.WriteResponse", {"committed_size": "5000000000"}),
    ]
    raw = [bytes.fromhex(a["hex"]) for a in protobuf([{"type": t, "dict": d} for t, d in messages])]
    assert ActionResult.decode(raw[0]) == ActionResult((OutputFile("policy.pte", A), OutputFile(".ptebuild/entry.json", C, True)), -1)
    assert reapi.find_missing_blobs_response(raw[1]) == [A, B]
    assert reapi.batch_read_blobs_response(raw[2]) == [(A, b"x" * 1000, reapi.Status()), (C, b"", reapi.Status(5, "missing"))]
    assert reapi.batch_update_blobs_response(raw[3]) == [(A, reapi.Status(3, "Data does not match hash")), (B, reapi.Status())]
    assert reapi.server_capabilities(raw[4]) == reapi.CacheCapabilities((1, 2), True, 4193280)
    assert reapi.server_capabilities(raw[5]) == reapi.CacheCapabilities()
    assert reapi.read_response(raw[6]) == b"chunk"
    assert reapi.write_response(raw[7]) == 5_000_000_000


def _top_level_ends(data: bytes) -> set[int]:
    """Where each top-level field of ``data`` ends (a valid message may be cut there)."""
    ends, at = {0}, 0
    while at < len(data):  # tag, then a length-delimited value: every field of an ActionResult is one
        length, start = 0, at + 1
        shift = 0
        while True:
            byte = data[start]
            length |= (byte & 0x7F) << shift
            start += 1
            shift += 7
            if not byte & 0x80:
                break
        at = start + length if data[at] & 7 == 2 else start
        ends.add(at)
    return ends


def test_every_truncation_of_an_action_result():
    data = ActionResult((OutputFile("policy.pte", A), OutputFile("w.ptd", B))).encode()
    ends = _top_level_ends(data)
    for cut in range(len(data)):
        if cut in ends:  # a field boundary: a shorter, valid message
            assert len(ActionResult.decode(data[:cut]).output_files) == sorted(ends).index(cut)
        else:
            with pytest.raises(FormatError, match=r"^ActionResult(\.output_files|: |.*OutputFile)"):
                ActionResult.decode(data[:cut])


@pytest.mark.parametrize(("data", "message"), [
    (b"\x12" + b"\xff" * 10, "ActionResult: a varint longer than 10 bytes at offset 1"),
    (b"\x12\x05abc", "ActionResult: field 2 at offset 0 runs past the end (5 bytes, 3 left)"),
    (b"\x00\x01", "ActionResult: field number 0 at offset 0"),
    (b"\x13", "ActionResult: wire type 3 of field 2 at offset 0 is not supported"),
    (b"\x21\x00\x00", "ActionResult: truncated fixed-size field 4 at offset 0"),
    (b"\x12\x04\x0a\x02\xc3\x28", "OutputFile.path at offset 4: not UTF-8"),
    (b"\x12\x10\x12\x0e\x0a\x01a\x10" + b"\xff" * 9 + b"\x01", "OutputFile.digest at offset 4: negative size -1"),
], ids=["long-varint", "past-the-end", "field-0", "group", "fixed32-cut", "path-not-utf8", "negative-size"])
def test_bad_messages(data, message):
    with pytest.raises(FormatError) as err:
        ActionResult.decode(data)
    assert str(err.value) == message


def test_fixed_size_fields_are_skipped_and_varints_round_trip():
    assert ActionResult.decode(b"\x29" + b"\x00" * 8 + b"\x35" + b"\x00" * 4 + b"\x20\x07") == ActionResult((), 7)
    for value in (0, 1, 127, 128, 300, 2**31 - 1, -1, -(2**31)):
        assert ActionResult.decode(b"\x20" + reapi.varint(value)).exit_code == value
    assert ActionResult.decode(b"\x20" + reapi.varint(2**32 + 5)).exit_code == 5  # an int32 keeps its low 32 bits
    assert len(reapi.varint(-1)) == 10
