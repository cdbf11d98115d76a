"""The pure-Python Core ML payload reader: a flattened folder written as its docstring says, every
truncation of it, a table of bad indexes, references, and a real payload of the session build."""

from __future__ import annotations

import json

import pytest

from ptebuild.errors import FormatError
from ptebuild.runtime.file_region import Blob
from ptebuild.runtime.payload_readers.coreml import list_files, read_model, read_reference


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _array_feature(name: str, shape: list[int], ranges: list[tuple[int, int]] | None = None) -> bytes:
    array = b"".join(_field(1, s) for s in shape) + _field(2, 65568)  # FLOAT32
    if ranges:
        array += _field(31, b"".join(_field(1, _field(1, lo) + _field(2, hi)) for lo, hi in ranges))
    return _field(1, name.encode()) + _field(3, _field(5, array))


MODEL = _field(1, 7) + _field(2, _field(1, _array_feature("x", [1, 8], [(1, 4), (8, 8)])) + _field(10, _array_feature("y", [])))
FILES_MODEL = "model.mlpackage/Data/com.apple.CoreML/model.mlmodel"
METADATA = json.dumps({"inputNames": ["x"], "outputNames": ["y"], "identifier": "executorch_test"}).encode()
FILES = {
    "metadata.json": METADATA,
    "model.mlpackage/Manifest.json": b"{}\n",
    FILES_MODEL: MODEL,
}


def flatten(files: dict[str, bytes]) -> bytes:
    """A flattened folder as :mod:`ptebuild.runtime.payload_readers.coreml` documents it."""
    data = bytearray()
    nodes: list[dict] = []

    def add(tree: dict, name: str) -> int:
        children = {}
        for key, value in tree.items():
            if isinstance(value, dict):
                children[key] = add(value, key)
            else:
                nodes.append({"name": key, "kind": 0, "dataRegion": {"offset": len(data), "size": len(value)}, "children": {}})
                data.extend(value)
                children[key] = len(nodes) - 1
        nodes.append({"name": name, "kind": 1, "dataRegion": {"offset": 0, "size": 0}, "children": children})
        return len(nodes) - 1

    tree: dict = {}
    for path, content in files.items():
        *folders, leaf = path.split("/")
        node = tree
        for folder in folders:
            node = node.setdefault(folder, {})
        node[leaf] = content
    add(tree, "lowered_module")
    return bytes(data) + json.dumps({"nodes": nodes}).encode()[::-1]


def test_reads_files_metadata_and_model():
    model = read_model(Blob.of_bytes(flatten(FILES), "payload"))
    assert model.files == {path: len(content) for path, content in FILES.items()}
    assert model.identifier == "executorch_test" and model.specification_version == 7
    main = model.function(None)
    assert main is not None
    assert [f.describe() for f in main.inputs] == ["x: float32[1..4, 8]"]
    assert [f.describe() for f in main.outputs] == ["y: float32[?]"]
    assert model.argument_names(None) == (["x"], ["y"])


def test_every_truncation_is_a_format_error():
    payload = flatten(FILES)
    for length in range(len(payload)):
        with pytest.raises(FormatError):
            read_model(Blob.of_bytes(payload[:length], f"cut at {length}"))


def _index(nodes) -> bytes:
    return json.dumps({"nodes": nodes}).encode()[::-1]


@pytest.mark.parametrize(("payload", "message"), [
    (b"not a folder", "not a Core ML folder: no byte-reversed JSON index at its end"),
    (_index([]), "corrupt Core ML folder index: no nodes"),
    (b"ab" + _index([{"name": "f", "kind": 0, "dataRegion": {"offset": 1, "size": 5}, "children": {}},
                     {"name": "r", "kind": 1, "children": {"f": 0}}]), "file 'f' [1, 6) overlaps the index at 2"),
    (_index([{"name": "r", "kind": 1, "children": {"a": 0}}]), "node 0 (of 1) named twice or missing"),
    (_index([{"name": "r", "kind": 7, "children": {}}]), "node 0 has kind 7"),
])
def test_bad_indexes(payload, message):
    with pytest.raises(FormatError) as info:
        list_files(Blob.of_bytes(payload, "payload"))
    assert str(info.value).startswith("payload: ") and message in str(info.value)


def test_bad_metadata_and_model():
    with pytest.raises(FormatError, match="payload: Core ML folder without metadata.json"):
        read_model(Blob.of_bytes(_index([{"name": "r", "kind": 1, "children": {}}]), "payload"))
    with pytest.raises(FormatError, match="corrupt metadata.json"):
        read_model(Blob.of_bytes(flatten({**FILES, "metadata.json": b"[1]"}), "payload"))
    with pytest.raises(FormatError, match=r"model.mlmodel: truncated: Model field 2 claims \d+ bytes"):
        read_model(Blob.of_bytes(flatten({**FILES, FILES_MODEL: MODEL[:-3]}), "payload"))


def test_references():
    assert read_reference(b"{...}", "payload") is None
    reference = read_reference(b'CMJR{"version": 1, "key": "coreml_executorch_x", "functionName": "decode"}', "payload")
    assert reference is not None and (reference.key, reference.function) == ("coreml_executorch_x", "decode")
    with pytest.raises(FormatError, match=r"payload: corrupt Core ML reference \(CMJR\)"):
        read_reference(b'CMJR{"key": 1', "payload")


def test_a_real_payload(mobile_build):
    from ptebuild.runtime.pte_file import open_pte

    with open_pte(mobile_build.out / "duo_coreml.pte") as pte:
        plan = next(p for p in pte.execution_plans() if p.name() == "encode")
        model = read_model(pte.delegate_payload(plan.delegates()[0], "encode"))
    assert set(model.files) >= {"metadata.json", "model.mlpackage/Manifest.json", FILES_MODEL}
    fn = model.function(None)
    assert fn is not None and fn.operations["linear"] == 2
    assert [f.describe() for f in fn.inputs] == ["args_0: float32[1..4, 8]"]
