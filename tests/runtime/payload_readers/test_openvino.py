"""The OpenVINO CPU payload reader: a payload laid out as the CPU plugin writes it, every
truncation, and bad headers (the real payloads are read in tests/backends/test_openvino.py)."""

from __future__ import annotations

import struct

import pytest

from ptebuild.errors import FormatError
from ptebuild.runtime.payload_readers.openvino import CPU_CODEC_KEY, HEADER, decode_model, read_openvino_blob, regions

IR = b"""<?xml version="1.0"?>
<net name="Model0" version="11">
\t<layers>
\t\t<layer id="0" name="arg_0" type="Parameter" version="opset1">
\t\t\t<data shape="4,16" element_type="f32" />
\t\t\t<output><port id="0" precision="FP32" names="arg_0"><dim>4</dim><dim>16</dim></port></output>
\t\t</layer>
\t\t<layer id="1" name="w" type="Const" version="opset1">
\t\t\t<data element_type="f32" shape="8, 16" offset="0" size="512" />
\t\t\t<output><port id="0" precision="FP32"><dim>8</dim><dim>16</dim></port></output>
\t\t</layer>
\t\t<layer id="2" name="mm" type="MatMul" version="opset1">
\t\t\t<output><port id="2" precision="FP32"><dim>4</dim><dim>8</dim></port></output>
\t\t</layer>
\t\t<layer id="3" name="out" type="Result" version="opset1" />
\t</layers>
\t<edges />
</net>
"""
CUSTOM = b'<?xml version="1.0"?>\n<cnndata>\n\t<outputs />\n</cnndata>\n'


def payload(ir: bytes = IR, weights: bytes = bytes(512)) -> bytes:
    model = bytes(b ^ CPU_CODEC_KEY[i % len(CPU_CODEC_KEY)] for i, b in enumerate(ir))
    at = HEADER.size
    spans = [(at, len(CUSTOM)), (at + len(CUSTOM), len(weights)), (at + len(CUSTOM) + len(weights), len(model))]
    return HEADER.pack(*(n for span in spans for n in span)) + CUSTOM + weights + model


def test_reads_what_the_model_holds():
    model = read_openvino_blob(payload(), "p.pte: forward delegate 0")
    assert (model.name, model.ir_version, model.layers) == ("Model0", "11", 4)
    assert model.layer_types == {"Const": 1, "MatMul": 1, "Parameter": 1, "Result": 1}
    assert model.inputs == ("arg_0:f32[4,16]",) and model.outputs == 1
    assert model.precisions == ("FP32",) and model.weights_bytes == 512
    assert model.describe() == "OpenVINO IR v11, 4 layers (MatMul 1), 1 inputs, 1 outputs, FP32, weights 512 bytes"
    assert decode_model(payload(), "p") == IR


def test_every_truncation_is_a_format_error():
    whole = payload()
    for length in range(len(whole)):
        with pytest.raises(FormatError, match="^p: "):
            read_openvino_blob(whole[:length], "p")


def _with_header(*fields: int) -> bytes:
    blob = payload()
    return struct.pack("<6Q", *fields) + blob[HEADER.size:]


@pytest.mark.parametrize("blob, message", [
    (_with_header(0, 57, 105, 512, 617, 100), "its custom data [0, +57) is not inside"),
    (_with_header(48, 57, 48, 512, 617, 100), "its weights [48, +512) is not inside"),
    (_with_header(48, 57, 105, 512, 617, 1 << 40), "its model [617, +1099511627776) is not inside"),
    (payload(ir=b"\x89GPU-blob" + IR), "is not the CPU plugin's IR (a GPU or NPU payload?)"),
    (payload(ir=b"<?xml version='1.0'?><net"), "the OpenVINO IR does not parse"),
    (payload(ir=b"<?xml version='1.0'?><model />"), "the OpenVINO IR's root is <model>, not <net>"),
])
def test_bad_payloads(blob, message):
    with pytest.raises(FormatError, match=f"^p: .*{message.replace('(', '.').replace(')', '.').replace('[', '.').replace('+', '.')}"):
        read_openvino_blob(blob, "p")
    if "inside" in message:
        with pytest.raises(FormatError):
            regions(blob, "p")
