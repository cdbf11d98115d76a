"""The pure-Python Vulkan payload reader: a real payload of the session build, every truncation
of it, and a table of bad headers."""

from __future__ import annotations

import struct

import pytest

from ptebuild.errors import FormatError
from ptebuild.runtime.file_region import Blob
from ptebuild.runtime.payload_readers.vulkan import HEADER, read_graph


@pytest.fixture(scope="module")
def payload(mobile_build) -> bytes:
    from ptebuild.runtime.pte_file import open_pte

    with open_pte(mobile_build.out / "duo_vulkan.pte") as pte:
        plan = next(p for p in pte.execution_plans() if p.name() == "encode")
        return pte.delegate_payload(plan.delegates()[0], "encode").whole("payload")


def test_reads_the_graph(payload):
    graph = read_graph(Blob.of_bytes(payload, "payload"))
    assert graph.operators == ("aten.linear.default", "aten.relu.default", "aten.linear.default")
    assert [v.describe() for v in graph.inputs] == ["float32[4, 8]"]
    assert [v.describe() for v in graph.outputs] == ["float32[4, 16]"]
    assert len(graph.named_keys) == 4 and all(len(k) == 64 for k in graph.named_keys)
    assert graph.constant_bytes == 0


def test_every_truncation_is_a_format_error(payload):
    for length in range(len(payload)):
        with pytest.raises(FormatError):
            read_graph(Blob.of_bytes(payload[:length], f"cut at {length}"))


def _with_header(payload: bytes, **fields) -> bytes:
    magic, header_size, fb_offset, fb_size, bytes_offset, bytes_size = HEADER.unpack_from(payload, 4)
    values = {"magic": magic, "header_size": header_size, "fb_offset": fb_offset, "fb_size": fb_size,
              "bytes_offset": bytes_offset, "bytes_size": bytes_size, **fields}
    return payload[:4] + HEADER.pack(*values.values()) + payload[4 + HEADER.size:]


@pytest.mark.parametrize(("fields", "message"), [
    ({"magic": b"XH00"}, "not a Vulkan payload: bytes 4..8 are b'XH00', expected b'VH00'"),
    ({"header_size": 12}, "bad Vulkan header: length 12"),
    ({"bytes_size": 1 << 40}, "truncated Vulkan payload: constants"),
    ({"fb_size": 1 << 20}, "lies outside the"),
])
def test_bad_headers(payload, fields, message):
    with pytest.raises(FormatError) as info:
        read_graph(Blob.of_bytes(_with_header(payload, **fields), "payload"))
    assert str(info.value).startswith("payload: ") and message in str(info.value)


def test_bad_identifier(payload):
    fb_offset = struct.unpack_from("<I", payload, 10)[0]
    broken = payload[: fb_offset + 4] + b"VK01" + payload[fb_offset + 8:]
    with pytest.raises(FormatError, match=r"Vulkan flatbuffer identifier b'VK01' at offset \d+, expected b'VK00'"):
        read_graph(Blob.of_bytes(broken, "payload"))
