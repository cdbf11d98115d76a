"""REAPI messages on the wire: the protobuf encoding of the few messages ptebuild exchanges.

Spec: ``build/bazel/remote/execution/v2/remote_execution.proto`` of bazelbuild/remote-apis (REAPI
v2), with googleapis' ``google/bytestream/bytestream.proto`` and ``google/rpc/status.proto``; the
encoding: https://protobuf.dev/programming-guides/encoding/. The messages are encoded by hand: no
generated code and no protobuf runtime at run time (the tests decode these bytes with the real
protobuf library against the REAPI schema, and encode with it what this module decodes).

Wire format
===========

A message is a sequence of fields, each a tag then a value. The tag is a varint,
``(field number << 3) | wire type``::

    type 0  varint            int32, int64, bool, enum: 7 bits a byte, least significant group
                              first, high bit set on every byte but the last; a negative int32 or
                              int64 is its 64-bit two's complement (10 bytes)
    type 2  length-delimited  a varint length, then that many bytes: a string (UTF-8), bytes, a
                              nested message, or a packed repeated scalar (varints back to back)
    type 1, 5                 64- and 32-bit fixed-size values: none of these messages has one;
                              skipped when met

Encoding follows protoc, so that these bytes equal ``SerializeToString()`` of the same message:
fields in field-number order, repeated ones in order; proto3 defaults (0, false, empty string or
bytes) left out; a nested message that is set written even when empty. Decoding skips unknown
fields (a server may add some: bazel-remote adds ``execution_metadata``), lets the last value of
a scalar win, and takes a repeated enum packed or not. A message that is truncated or malformed
raises :class:`~ptebuild.errors.FormatError` naming the message and the byte offset.

Messages (field number, name, type)
===================================

``build.bazel.remote.execution.v2``::

    Digest                     1 hash string (64 lowercase hex)   2 size_bytes int64
    ActionResult               2 output_files repeated OutputFile   4 exit_code int32
                               (3, 5-12: directories, stdout/stderr, metadata, symlinks: skipped)
    OutputFile                 1 path string   2 digest Digest   4 is_executable bool
                               (5 contents, 7 node_properties: skipped)
    GetActionResultRequest     1 instance_name   2 action_digest Digest   6 digest_function enum
    UpdateActionResultRequest  1 instance_name   2 action_digest Digest   3 action_result ActionResult
                               5 digest_function enum
    FindMissingBlobsRequest    1 instance_name   2 blob_digests repeated Digest   3 digest_function
    FindMissingBlobsResponse   2 missing_blob_digests repeated Digest
    BatchUpdateBlobsRequest    1 instance_name   2 requests repeated {1 digest Digest, 2 data bytes}
                               5 digest_function
    BatchUpdateBlobsResponse   1 responses repeated {1 digest Digest, 2 status Status}
    BatchReadBlobsRequest      1 instance_name   2 digests repeated Digest   4 digest_function
    BatchReadBlobsResponse     1 responses repeated {1 digest Digest, 2 data bytes, 3 status Status}
    GetCapabilitiesRequest     1 instance_name
    ServerCapabilities         1 cache_capabilities CacheCapabilities
    CacheCapabilities          1 digest_functions repeated enum (packed)
                               2 action_cache_update_capabilities {1 update_enabled bool}
                               4 max_batch_total_size_bytes int64 (0: no limit of the server's own)

``google.bytestream`` and ``google.rpc``::

    ReadRequest                1 resource_name string   2 read_offset int64   3 read_limit int64
    ReadResponse               10 data bytes
    WriteRequest               1 resource_name string (first message only)   2 write_offset int64
                               3 finish_write bool   10 data bytes
    WriteResponse              1 committed_size int64
    Status                     1 code int32 (a gRPC status code)   2 message string   3 details (skipped)

``DigestFunction.SHA256`` is 1, sent in every request that has the field (servers older than
REAPI 2.3 ignore it). ByteStream resource names: ``{instance}/blobs/{hash}/{size}`` to read,
``{instance}/uploads/{uuid}/blobs/{hash}/{size}`` to write; with the empty instance name there is
no leading ``/``.

Limits: a varint has at most 10 bytes; a length may not run past the end of its message; nested
messages are decoded only where this module names them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from ptebuild.errors import FormatError

SHA256 = 1
"""``DigestFunction.Value.SHA256``."""

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5

#: gRPC method paths (``/package.Service/Method``).
CAPABILITIES = "/build.bazel.remote.execution.v2.Capabilities/GetCapabilities"
GET_ACTION_RESULT = "/build.bazel.remote.execution.v2.ActionCache/GetActionResult"
UPDATE_ACTION_RESULT = "/build.bazel.remote.execution.v2.ActionCache/UpdateActionResult"
FIND_MISSING_BLOBS = "/build.bazel.remote.execution.v2.ContentAddressableStorage/FindMissingBlobs"
BATCH_UPDATE_BLOBS = "/build.bazel.remote.execution.v2.ContentAddressableStorage/BatchUpdateBlobs"
BATCH_READ_BLOBS = "/build.bazel.remote.execution.v2.ContentAddressableStorage/BatchReadBlobs"
BYTESTREAM_READ = "/google.bytestream.ByteStream/Read"
BYTESTREAM_WRITE = "/google.bytestream.ByteStream/Write"


# -- values ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Digest:
    """A blob's name in REAPI: its SHA-256 (lowercase hex) and its size in bytes."""

    hash: str
    size: int

    @classmethod
    def of(cls, data: bytes) -> Digest:
        return cls(hashlib.sha256(data).hexdigest(), len(data))

    def __str__(self) -> str:
        return f"{self.hash}/{self.size}"


@dataclass(frozen=True)
class OutputFile:
    path: str
    digest: Digest
    is_executable: bool = False


@dataclass(frozen=True)
class ActionResult:
    """The fields of ``ActionResult`` a cache entry uses."""

    output_files: tuple[OutputFile, ...] = ()
    exit_code: int = 0

    def encode(self) -> bytes:
        out = bytearray()
        for f in self.output_files:
            out += _message(2, _string(1, f.path) + _message(2, _digest(f.digest)) + _varint_field(4, int(f.is_executable)))
        out += _varint_field(4, self.exit_code)
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> ActionResult:
        files = []
        exit_code = 0
        for f in _fields(data, "ActionResult"):
            if f.number == 2 and f.wire == LENGTH:
                files.append(_output_file(f))
            elif f.number == 4 and f.wire == VARINT:
                exit_code = _int32(f.value)
        return cls(tuple(files), exit_code)


@dataclass(frozen=True)
class Status:
    """A ``google.rpc.Status``: a gRPC status code (0 is OK) and its message."""

    code: int = 0
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.code == 0


@dataclass(frozen=True)
class CacheCapabilities:
    digest_functions: tuple[int, ...] = ()
    update_enabled: bool = False
    max_batch_total_size_bytes: int = 0


# -- requests and responses -----------------------------------------------------------------------


def get_action_result_request(instance: str, action: Digest) -> bytes:
    return _string(1, instance) + _message(2, _digest(action)) + _varint_field(6, SHA256)


def update_action_result_request(instance: str, action: Digest, result: ActionResult) -> bytes:
    return (_string(1, instance) + _message(2, _digest(action)) + _message(3, result.encode())
            + _varint_field(5, SHA256))


def find_missing_blobs_request(instance: str, digests: Iterable[Digest]) -> bytes:
    return (_string(1, instance) + b"".join(_message(2, _digest(d)) for d in digests)
            + _varint_field(3, SHA256))


def find_missing_blobs_response(data: bytes) -> list[Digest]:
    return [_decode_digest(f, "FindMissingBlobsResponse.missing_blob_digests")
            for f in _fields(data, "FindMissingBlobsResponse") if f.number == 2 and f.wire == LENGTH]


def batch_update_blobs_request(instance: str, blobs: Iterable[tuple[Digest, bytes]]) -> bytes:
    parts = [_string(1, instance)]
    parts += [_message(2, _message(1, _digest(d)) + _bytes(2, data)) for d, data in blobs]
    parts.append(_varint_field(5, SHA256))
    return b"".join(parts)


def batch_update_blobs_response(data: bytes) -> list[tuple[Digest, Status]]:
    out = []
    for f in _fields(data, "BatchUpdateBlobsResponse"):
        if f.number != 1 or f.wire != LENGTH:
            continue
        digest, status = None, Status()
        for g in _fields(f.data, "BatchUpdateBlobsResponse.Response", f.at):
            if g.number == 1 and g.wire == LENGTH:
                digest = _decode_digest(g, "BatchUpdateBlobsResponse.Response.digest")
            elif g.number == 2 and g.wire == LENGTH:
                status = _status(g)
        if digest is None:
            raise FormatError(f"BatchUpdateBlobsResponse.Response at offset {f.at}: no digest")
        out.append((digest, status))
    return out


def batch_read_blobs_request(instance: str, digests: Iterable[Digest]) -> bytes:
    return (_string(1, instance) + b"".join(_message(2, _digest(d)) for d in digests)
            + _varint_field(4, SHA256))


def batch_read_blobs_response(data: bytes) -> list[tuple[Digest, bytes, Status]]:
    out = []
    for f in _fields(data, "BatchReadBlobsResponse"):
        if f.number != 1 or f.wire != LENGTH:
            continue
        digest, blob, status = None, b"", Status()
        for g in _fields(f.data, "BatchReadBlobsResponse.Response", f.at):
            if g.number == 1 and g.wire == LENGTH:
                digest = _decode_digest(g, "BatchReadBlobsResponse.Response.digest")
            elif g.number == 2 and g.wire == LENGTH:
                blob = g.data
            elif g.number == 3 and g.wire == LENGTH:
                status = _status(g)
        if digest is None:
            raise FormatError(f"BatchReadBlobsResponse.Response at offset {f.at}: no digest")
        out.append((digest, blob, status))
    return out


def get_capabilities_request(instance: str) -> bytes:
    return _string(1, instance)


def server_capabilities(data: bytes) -> CacheCapabilities:
    """The ``cache_capabilities`` of a ``ServerCapabilities`` (all defaults if it has none)."""
    functions: list[int] = []
    update, max_batch = False, 0
    for f in _fields(data, "ServerCapabilities"):
        if f.number != 1 or f.wire != LENGTH:
            continue
        for g in _fields(f.data, "CacheCapabilities", f.at):
            if g.number == 1 and g.wire == VARINT:
                functions.append(g.value)
            elif g.number == 1 and g.wire == LENGTH:
                functions += _packed_varints(g, "CacheCapabilities.digest_functions")
            elif g.number == 2 and g.wire == LENGTH:
                for h in _fields(g.data, "ActionCacheUpdateCapabilities", g.at):
                    if h.number == 1 and h.wire == VARINT:
                        update = bool(h.value)
            elif g.number == 4 and g.wire == VARINT:
                max_batch = _int64(g.value)
    return CacheCapabilities(tuple(functions), update, max_batch)


def read_request(resource_name: str, offset: int = 0) -> bytes:
    return _string(1, resource_name) + _varint_field(2, offset)


def read_response(data: bytes) -> bytes:
    """The ``data`` of a ``ReadResponse``."""
    chunk = b""
    for f in _fields(data, "ReadResponse"):
        if f.number == 10 and f.wire == LENGTH:
            chunk = f.data
    return chunk


def write_request(resource_name: str, offset: int, data: bytes, finish: bool) -> bytes:
    """A ``WriteRequest``; ``resource_name`` is empty in every message but the first."""
    return (_string(1, resource_name) + _varint_field(2, offset) + _varint_field(3, int(finish))
            + _bytes(10, data))


def write_response(data: bytes) -> int:
    """The ``committed_size`` of a ``WriteResponse``."""
    size = 0
    for f in _fields(data, "WriteResponse"):
        if f.number == 1 and f.wire == VARINT:
            size = _int64(f.value)
    return size


def read_resource(instance: str, digest: Digest) -> str:
    return f"{instance}/blobs/{digest}" if instance else f"blobs/{digest}"


def write_resource(instance: str, upload_id: str, digest: Digest) -> str:
    name = f"uploads/{upload_id}/blobs/{digest}"
    return f"{instance}/{name}" if instance else name


# -- encoding -------------------------------------------------------------------------------------


def varint(value: int) -> bytes:
    """The varint of ``value`` (a negative one as its 64-bit two's complement: 10 bytes)."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint_field(number: int, value: int) -> bytes:
    return varint(number << 3 | VARINT) + varint(value) if value else b""


def _bytes(number: int, data: bytes) -> bytes:
    return varint(number << 3 | LENGTH) + varint(len(data)) + data if data else b""


def _string(number: int, text: str) -> bytes:
    return _bytes(number, text.encode())


def _message(number: int, body: bytes) -> bytes:
    return varint(number << 3 | LENGTH) + varint(len(body)) + body


def _digest(d: Digest) -> bytes:
    return _string(1, d.hash) + _varint_field(2, d.size)


# -- decoding -------------------------------------------------------------------------------------


class _Field(NamedTuple):
    number: int
    wire: int
    value: int
    """A varint's value (0 for other wire types)."""
    data: bytes
    """A length-delimited value's bytes (empty for other wire types)."""
    at: int
    """Where the value (a varint field: the field) starts, from the start of the outermost message."""


def _read_varint(data: bytes, at: int, what: str, base: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(at, min(at + 10, len(data))):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i + 1
        shift += 7
    if len(data) - at >= 10:
        raise FormatError(f"{what}: a varint longer than 10 bytes at offset {base + at}")
    raise FormatError(f"{what}: truncated varint at offset {base + at}")


def _fields(data: bytes, what: str, base: int = 0) -> Iterator[_Field]:
    """Each field of the message ``data`` (``what``, for errors), which starts at offset ``base``
    of the outermost message."""
    at, end = 0, len(data)
    while at < end:
        start = at
        tag, at = _read_varint(data, at, what, base)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise FormatError(f"{what}: field number 0 at offset {base + start}")
        if wire == VARINT:
            value, at = _read_varint(data, at, what, base)
            yield _Field(number, wire, value, b"", base + start)
        elif wire == LENGTH:
            length, at = _read_varint(data, at, what, base)
            if length > end - at:
                raise FormatError(f"{what}: field {number} at offset {base + start} runs past the end "
                                  f"({length} bytes, {end - at} left)")
            yield _Field(number, wire, 0, data[at:at + length], base + at)
            at += length
        elif wire in (FIXED64, FIXED32):
            at += 8 if wire == FIXED64 else 4
            if at > end:
                raise FormatError(f"{what}: truncated fixed-size field {number} at offset {base + start}")
        else:
            raise FormatError(f"{what}: wire type {wire} of field {number} at offset {base + start} is not supported")


def _packed_varints(f: _Field, what: str) -> list[int]:
    out, at = [], 0
    while at < len(f.data):
        value, at = _read_varint(f.data, at, what, f.at)
        out.append(value)
    return out


def _int64(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _int32(value: int) -> int:
    value &= (1 << 32) - 1
    return value - (1 << 32) if value >= 1 << 31 else value


def _text(f: _Field, what: str) -> str:
    try:
        return f.data.decode()
    except UnicodeDecodeError:
        raise FormatError(f"{what} at offset {f.at}: not UTF-8") from None


def _decode_digest(f: _Field, what: str) -> Digest:
    hash_, size = "", 0
    for g in _fields(f.data, what, f.at):
        if g.number == 1 and g.wire == LENGTH:
            hash_ = _text(g, f"{what}.hash")
        elif g.number == 2 and g.wire == VARINT:
            size = _int64(g.value)
    if size < 0:
        raise FormatError(f"{what} at offset {f.at}: negative size {size}")
    return Digest(hash_, size)


def _output_file(f: _Field) -> OutputFile:
    path, digest, executable = "", Digest("", 0), False
    for g in _fields(f.data, "ActionResult.output_files", f.at):
        if g.number == 1 and g.wire == LENGTH:
            path = _text(g, "OutputFile.path")
        elif g.number == 2 and g.wire == LENGTH:
            digest = _decode_digest(g, "OutputFile.digest")
        elif g.number == 4 and g.wire == VARINT:
            executable = bool(g.value)
    return OutputFile(path, digest, executable)


def _status(f: _Field) -> Status:
    code, message = 0, ""
    for g in _fields(f.data, "Status", f.at):
        if g.number == 1 and g.wire == VARINT:
            code = _int32(g.value)
        elif g.number == 2 and g.wire == LENGTH:
            message = g.data.decode(errors="replace")
    return Status(code, message)
