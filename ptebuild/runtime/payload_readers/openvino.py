"""Reads an OpenVINO delegate payload (``processed`` bytes in a ``.pte``) in pure Python.

ExecuTorch 1.5.1's ``OpenvinoBackend.preprocess`` stores ``CompiledModel.export_model()``: for
the CPU plugin, the stream that ``ov::pass::StreamSerialize`` writes (OpenVINO 2025.4
``src/core/src/pass/serialize.cpp``; ``src/plugins/intel_cpu/src/utils/serialize.cpp``). Its
layout, little-endian, every offset from the start of the payload:

=========  ============================================================================
0..48      DataHeader: six u64: custom_data_offset, custom_data_size, consts_offset,
           consts_size, model_offset, model_size (seen: 48, then each region right after
           the one before, the model ending the payload)
custom     plain XML, ``<cnndata>`` (the plugin's own notes, e.g. ``<outputs />``)
consts     the weights, raw; the model's ``Const`` layers name their ``offset``/``size`` in it
model      the OpenVINO IR (``<net name=... version="11">``: ``<layers>``, ``<edges>``,
           ``<rt_info>``), XORed byte by byte with the CPU plugin's fixed 12-byte key
           (:data:`CPU_CODEC_KEY`, ``codec_xor``): not a secret, a guard against editing
=========  ============================================================================

The IR is the model as the CPU plugin compiled it (fused ``Subgraph`` layers of its snippets,
the ports' precisions it chose), so :func:`read_openvino_blob` reports what the delegate holds:
layers by type, inputs, outputs, precisions, the weights' size. GPU and NPU payloads are the
plugins' own binary formats: :class:`FormatError` says so.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ptebuild.errors import FormatError
from ptebuild.runtime.payloads import DelegatePayload, PayloadInfo, PayloadReader

BACKEND_ID = "OpenvinoBackend"
HEADER = struct.Struct("<6Q")
CPU_CODEC_KEY = bytes([0x30, 0x60, 0x70, 0x02, 0x04, 0x08, 0x3F, 0x6F, 0x72, 0x74, 0x78, 0x7F])
"""The CPU plugin's ``codec_xor`` key (``intel_cpu/src/utils/codec_xor.cpp``), recovered from
the known start of every IR, ``<?xml version="1.0"?>``."""
_XML_START = b"<?xml"


@dataclass(frozen=True)
class OpenvinoModel:
    """What an OpenVINO CPU payload holds."""

    name: str
    ir_version: str
    layers: int
    layer_types: dict[str, int] = field(default_factory=dict)
    """Layer type -> count (``Parameter``, ``Const``, ``Subgraph``, ``MatMul``, ``Result``...)."""
    inputs: tuple[str, ...] = ()
    """Each ``Parameter`` as ``name:element_type[shape]``."""
    outputs: int = 0
    precisions: tuple[str, ...] = ()
    """The precisions of the ports of compute layers (``FP32``, ``BF16``...): what it infers in."""
    weights_bytes: int = 0

    def describe(self) -> str:
        compute = {t: n for t, n in self.layer_types.items() if t not in ("Parameter", "Const", "Result")}
        kinds = ", ".join(f"{t} {n}" for t, n in sorted(compute.items(), key=lambda item: (-item[1], item[0])))
        return (
            f"OpenVINO IR v{self.ir_version}, {self.layers} layers ({kinds or 'no compute layers'}), "
            f"{len(self.inputs)} inputs, {self.outputs} outputs, {'/'.join(self.precisions) or '-'}, "
            f"weights {self.weights_bytes} bytes"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "ir_version": self.ir_version, "layers": self.layers,
            "layer_types": dict(self.layer_types), "inputs": list(self.inputs), "outputs": self.outputs,
            "precisions": list(self.precisions), "weights_bytes": self.weights_bytes,
        }


def regions(blob: bytes, source: str) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """The (offset, size) of the custom data, the weights and the model; FormatError unless the
    header's regions lie inside the payload, in order, without overlapping."""
    if len(blob) < HEADER.size:
        raise FormatError(f"{source}: OpenVINO payload of {len(blob)} bytes is shorter than its {HEADER.size}-byte header")
    custom_at, custom_size, consts_at, consts_size, model_at, model_size = HEADER.unpack_from(blob, 0)
    spans = ((custom_at, custom_size), (consts_at, consts_size), (model_at, model_size))
    end = HEADER.size
    for name, (at, size) in zip(("custom data", "weights", "model"), spans):
        if at < end or at + size > len(blob):
            raise FormatError(
                f"{source}: not an OpenVINO CPU payload: its {name} [{at}, +{size}) is not inside the "
                f"{len(blob)}-byte payload after byte {end}"
            )
        end = at + size
    return spans


def decode_model(blob: bytes, source: str) -> bytes:
    """The IR's XML text (the model region, un-XORed)."""
    _, _, (at, size) = regions(blob, source)
    data = blob[at : at + size]
    stream = (CPU_CODEC_KEY * (size // len(CPU_CODEC_KEY) + 1))[:size]
    # XOR as one big integer: a byte loop in Python costs seconds on a large model's IR.
    text = (int.from_bytes(data, "little") ^ int.from_bytes(stream, "little")).to_bytes(size, "little")
    if not text.startswith(_XML_START):
        raise FormatError(f"{source}: the model region at {at} is not the CPU plugin's IR (a GPU or NPU payload?)")
    return text


def read_openvino_blob(blob: bytes, source: str) -> OpenvinoModel:
    """Describe an OpenVINO CPU payload; ``source`` names it in messages (``model.pte: forward
    delegate 0``). Raises FormatError if it is not one, or is corrupt."""
    import xml.etree.ElementTree as ET

    text = decode_model(blob, source)
    _, (_, weights), _ = regions(blob, source)
    try:
        net = ET.fromstring(text)
    except ET.ParseError as exc:
        raise FormatError(f"{source}: the OpenVINO IR does not parse: {exc}") from None
    if net.tag != "net":
        raise FormatError(f"{source}: the OpenVINO IR's root is <{net.tag}>, not <net>")
    layers = net.findall("./layers/layer")
    types = Counter(layer.get("type", "?") for layer in layers)
    inputs = []
    precisions = set()
    for layer in layers:
        kind = layer.get("type")
        if kind == "Parameter":
            data = layer.find("data")
            shape = data.get("shape", "?") if data is not None else "?"
            dtype = data.get("element_type", "?") if data is not None else "?"
            inputs.append(f"{layer.get('name', '?')}:{dtype}[{shape}]")
        elif kind not in ("Const", "Result"):
            for port in layer.findall("./output/port"):
                if port.get("precision"):
                    precisions.add(port.get("precision", ""))
    return OpenvinoModel(
        name=net.get("name", ""),
        ir_version=net.get("version", "?"),
        layers=len(layers),
        layer_types=dict(sorted(types.items())),
        inputs=tuple(inputs),
        outputs=types.get("Result", 0),
        precisions=tuple(sorted(precisions)),
        weights_bytes=weights,
    )


_NOT_COMPUTE = ("Parameter", "Const", "Result")


class OpenvinoReader(PayloadReader):
    """The OpenVINO delegate's payloads (:mod:`ptebuild.runtime.payloads`): its weights are inside
    it (ExecuTorch's ``OpenvinoBackend`` reads nothing else), so it needs no key."""

    delegate_id = BACKEND_ID
    name = "OpenVINO"
    describes_contents = True

    def keys(self, payload: DelegatePayload) -> frozenset[str]:
        return frozenset()

    def describe(self, payload: DelegatePayload) -> PayloadInfo:
        model = read_openvino_blob(payload.whole(), payload.where)
        return PayloadInfo((), model.to_json(), model.describe())

    def operators(self, payload: DelegatePayload) -> dict[str, int]:
        model = read_openvino_blob(payload.whole(), payload.where)
        return {kind: n for kind, n in model.layer_types.items() if kind not in _NOT_COMPUTE}

    def weights_bytes(self, payload: DelegatePayload) -> int | None:
        head = payload.head(HEADER.size)
        if len(head) < HEADER.size:
            return None
        _, _, consts_at, consts_size, _, _ = HEADER.unpack_from(head, 0)
        return int(consts_size) if consts_at + consts_size <= payload.size else None


READERS: tuple[PayloadReader, ...] = (OpenvinoReader(),)
"""What this module reads: :data:`ptebuild.runtime.payloads.READER_MODULES` takes it, and the
backend declares it (``Backend.payload_readers``)."""
