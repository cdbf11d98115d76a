"""The real protobuf library against the REAPI schema, for the tests of ptebuild's hand encoding.

The schema is BuildGrid's generated modules (protoc's output for ``remote_execution.proto``,
``bytestream.proto`` and ``status.proto`` of bazelbuild/remote-apis and googleapis), with
protobuf 7.36.2, in BuildGrid's venv (``.venv-buildgrid``: ``./bootstrap.sh --test`` makes it),
run in a subprocess: ptebuild's venv has neither the schema nor needs it.
"""

from __future__ import annotations

import json
import subprocess

from helpers import ROOT, unavailable

SCRIPT = r"""
import json, sys
from google.protobuf import descriptor_pool, json_format, message_factory
from google.protobuf.unknown_fields import UnknownFieldSet
import buildgrid._protos.build.bazel.remote.execution.v2.remote_execution_pb2  # noqa: F401
import buildgrid._protos.google.bytestream.bytestream_pb2  # noqa: F401
import buildgrid._protos.google.rpc.status_pb2  # noqa: F401

pool = descriptor_pool.Default()
out = []
for item in json.load(sys.stdin):
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(item["type"]))
    if "hex" in item:
        raw = bytes.fromhex(item["hex"])
        message = cls.FromString(raw)
        out.append({"dict": json_format.MessageToDict(message, preserving_proto_field_name=True),
                    "same_bytes": message.SerializeToString(deterministic=True) == raw,
                    "unknown_fields": len(UnknownFieldSet(message))})
    else:
        message = json_format.ParseDict(item["dict"], cls())
        out.append({"hex": message.SerializeToString(deterministic=True).hex()})
json.dump(out, sys.stdout)
"""

V2 = "build.bazel.remote.execution.v2."


def protobuf(items: list[dict]) -> list[dict]:
    """Decode (``{"type", "hex"}``) or encode (``{"type", "dict"}``) each item with protobuf:
    ``{"dict", "same_bytes", "unknown_fields"}`` or ``{"hex"}`` each, in order."""
    python = ROOT / ".venv-buildgrid" / "bin" / "python"
    if not python.is_file():
        unavailable("BuildGrid's venv (the REAPI schema) is not installed: ./bootstrap.sh --test makes .venv-buildgrid")
    done = subprocess.run([str(python), "-c", SCRIPT], input=json.dumps(items), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def decode(type_name: str, data: bytes) -> dict:
    """``data`` decoded as ``type_name`` (``ActionResult``: the v2 package is implied)."""
    name = type_name if "." in type_name else V2 + type_name
    [answer] = protobuf([{"type": name, "hex": data.hex()}])
    assert answer["same_bytes"] and answer["unknown_fields"] == 0, answer
    return answer["dict"]
