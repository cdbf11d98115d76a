"""Reads a Core ML delegate payload (``processed`` bytes in a ``.pte``) in pure Python.

ExecuTorch 1.5.1's ``CoreMLBackend`` (``backends/apple/coreml/compiler/coreml_preprocess.py``)
stores one of two things as a delegate's payload:

- **a flattened folder** (``executorchcoreml.flatten_directory_contents``, the C++ of
  ``runtime/inmemoryfs/inmemory_filesystem.cpp``): the files' bytes one after the other from
  offset 0 (each at an offset aligned as the writer chose: 1 in 1.5.1, so contiguous), then,
  **byte-reversed at the very end**, a JSON index (its runtime reads it backwards from the last
  byte)::

      {"nodes": [{"name": "metadata.json", "kind": 0, "dataRegion": {"offset": 0, "size": 124},
                  "children": {}}, ...,
                 {"name": "...", "kind": 1, "dataRegion": {...}, "children": {"metadata.json": 0, ...}}]}

  ``kind`` 0 is a file (its bytes are ``[offset, offset + size)`` of the payload), 1 a folder
  (``children`` maps names to node indexes); the **last node is the root**. The folder holds
  ``metadata.json`` (``{"inputNames": [...], "outputNames": [...], "identifier": "executorch_<uuid>"}``;
  for a multifunction model ``{"identifier": ..., "methods": {method: {"inputNames", "outputNames"}}}``:
  the names the runtime binds the method's arguments to, in order), ``debug_info.json`` and the
  model: ``model.mlpackage/`` (``Manifest.json``, ``Data/com.apple.CoreML/model.mlmodel``, the
  ``Model`` protobuf, and ``.../weights/weight.bin``) or, for ``model_type = compiled_model``
  (made on macOS only), ``model.mlmodelc/``.
- **a reference** (several methods sharing one multifunction model, the default
  ``multimethod_weight_sharing_strategy``): ``CMJR`` then JSON
  ``{"version": 1, "key": "coreml_executorch_<uuid>", "functionName": "<method>"}``; the
  flattened folder is the ``.pte``'s named data under ``key``.

The model (``model.mlmodel``): coremltools' ``Model.proto`` (``coremltools/proto``, spec 9 for
coremltools 9.0), read with :mod:`.protobuf`. Fields read: ``Model`` {1: specificationVersion,
2: description, 502: mlProgram}; ``ModelDescription`` {1: input, 10: output, 20: functions,
21: defaultFunctionName}; ``FunctionDescription`` {1: name, 2: input, 3: output};
``FeatureDescription`` {1: name, 3: type}; ``FeatureType`` {5: multiArrayType, 8: stateType
{1: arrayType}; others by name only}; ``ArrayFeatureType`` {1: shape [int64], 2: dataType,
21: enumeratedShapes {1: shapes [{1: shape}]}, 31: shapeRange {1: sizeRanges [{1: lowerBound,
2: upperBound (-1 unbounded)}]}}; MIL ``Program`` {2: functions map<string, Function>},
``Function`` {2: opset, 3: block_specializations map<string, Block>}, ``Block``
{3: operations}, ``Operation`` {1: type, 4: blocks}.

Limits: the JSON index is read from the tail, growing the read until it parses (at most the
whole payload); every file region must lie before it. A compiled ``.mlmodelc`` is listed but
its model is not read (its format is Apple's). Imports neither torch nor executorch nor
coremltools.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ptebuild.errors import FormatError
from ptebuild.runtime.file_region import Blob
from ptebuild.runtime.payloads import DelegatePayload, PayloadInfo, PayloadReader
from ptebuild.runtime.protobuf import Message

BACKEND_ID = "CoreMLBackend"
REFERENCE_MAGIC = b"CMJR"
METADATA_FILE = "metadata.json"
MODEL_SPEC_FILE = "model.mlpackage/Data/com.apple.CoreML/model.mlmodel"
COMPILED_MODEL_DIR = "model.mlmodelc"
FILE, FOLDER = 0, 1
_TAIL_READ = 4096
_REFERENCE_HEAD = 4096
"""A payload that is a reference is a short JSON; a model can be gigabytes: only this much is read."""
ARRAY_DTYPES = {65552: "float16", 65568: "float32", 65600: "float64", 131080: "int8", 131104: "int32"}
"""``ArrayFeatureType.ArrayDataType`` -> dtype name (coremltools 9.0 ``FeatureTypes.proto``)."""
_FEATURE_KINDS = {1: "int64", 2: "double", 3: "string", 4: "image", 5: "multiArray", 6: "dictionary", 7: "sequence", 8: "state"}
SPEC_VERSION_TARGETS = {4: "iOS13", 5: "iOS14", 6: "iOS15", 7: "iOS16", 8: "iOS17", 9: "iOS18", 10: "iOS26"}
"""Core ML specification version -> the oldest iOS that loads it (macOS 10.15..26 alike)."""


@dataclass(frozen=True)
class Reference:
    """A ``CMJR`` payload: the method's model is function ``function`` of named data ``key``."""

    key: str
    function: str
    version: int


@dataclass(frozen=True)
class Feature:
    """A model input or output. ``kind`` ``multiArray`` (or ``state``) carries a dtype and a shape:
    ``shape`` the default one; ``ranges`` ``(lower, upper)`` per dim (upper -1: unbounded) when
    the shape is flexible, ``enumerated`` the allowed shapes when it is a list."""

    name: str
    kind: str
    dtype: str | None = None
    shape: tuple[int, ...] = ()
    ranges: tuple[tuple[int, int], ...] | None = None
    enumerated: tuple[tuple[int, ...], ...] | None = None

    def dims(self) -> str:
        """The shape as text: ``[1..8, 3]`` for ranges, ``[2, 3]`` fixed, ``[?]`` unknown rank."""
        if self.ranges is not None:
            return "[" + ", ".join(str(lo) if lo == hi else f"{lo}..{'' if hi < 0 else hi}" for lo, hi in self.ranges) + "]"
        if self.enumerated:
            return " | ".join("[" + ", ".join(map(str, s)) + "]" for s in self.enumerated)
        return "[" + ", ".join(map(str, self.shape)) + "]" if self.shape else "[?]"

    def describe(self) -> str:
        if self.kind not in ("multiArray", "state"):
            return f"{self.name}: {self.kind}"
        prefix = "state " if self.kind == "state" else ""
        return f"{self.name}: {prefix}{self.dtype}{self.dims()}"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "kind": self.kind, "dtype": self.dtype, "shape": list(self.shape)}
        if self.ranges is not None:
            data["ranges"] = [list(r) for r in self.ranges]
        if self.enumerated is not None:
            data["enumerated"] = [list(s) for s in self.enumerated]
        return data


@dataclass(frozen=True)
class ModelFunction:
    """One function of the model (``main`` for a model of one): its features and MIL operations."""

    name: str
    inputs: tuple[Feature, ...]
    outputs: tuple[Feature, ...]
    operations: dict[str, int] = field(default_factory=dict)
    """MIL operation type -> count (nested blocks included); empty when not an ML program."""


@dataclass(frozen=True)
class CoreMLModel:
    """What a flattened Core ML folder holds."""

    files: dict[str, int]
    """Path -> size of each file of the folder."""
    metadata: dict[str, Any]
    """``metadata.json`` as written (names the runtime binds arguments to; the identifier)."""
    specification_version: int | None
    """None for a compiled model (``model.mlmodelc``), whose specification is not read."""
    functions: tuple[ModelFunction, ...]
    default_function: str

    @property
    def identifier(self) -> str:
        return str(self.metadata.get("identifier", ""))

    def function(self, name: str | None) -> ModelFunction | None:
        """Function ``name`` (None: the default one)."""
        wanted = name or self.default_function
        return next((f for f in self.functions if f.name == wanted), None)

    def argument_names(self, method: str | None) -> tuple[list[str], list[str]]:
        """``(inputNames, outputNames)`` of ``metadata.json`` for ``method`` (a multifunction
        model's entry) or the model's own; empty lists when absent."""
        entry = self.metadata
        if method is not None and isinstance(self.metadata.get("methods"), dict):
            entry = self.metadata["methods"].get(method) or {}
        return list(entry.get("inputNames") or []), list(entry.get("outputNames") or [])

    def summary(self, function: str | None) -> str:
        """One line: specification, the function's operations and features."""
        fn = self.function(function)
        head = f"Core ML model, specification {self.specification_version}" if self.specification_version else "Core ML compiled model"
        if self.specification_version in SPEC_VERSION_TARGETS:
            head += f" (iOS {SPEC_VERSION_TARGETS[self.specification_version][3:]}+)"
        if fn is None:
            return head
        ops = sum(fn.operations.values())
        top = ", ".join(f"{t} {n}" for t, n in sorted(fn.operations.items(), key=lambda i: (-i[1], i[0]))[:6])
        more = ", ..." if len(fn.operations) > 6 else ""
        name = f"function {fn.name}: " if len(self.functions) > 1 else ""
        inputs = ", ".join(f.describe() for f in fn.inputs) or "-"
        outputs = ", ".join(f.describe() for f in fn.outputs) or "-"
        return f"{head}; {name}{ops} MIL operations ({top}{more}); inputs {inputs}; outputs {outputs}"

    def to_json(self, function: str | None = None) -> dict[str, Any]:
        fn = self.function(function)
        return {
            "identifier": self.identifier,
            "specification_version": self.specification_version,
            "function": fn.name if fn else None,
            "functions": [f.name for f in self.functions],
            "inputs": [f.to_json() for f in fn.inputs] if fn else [],
            "outputs": [f.to_json() for f in fn.outputs] if fn else [],
            "operations": dict(sorted(fn.operations.items())) if fn else {},
            "files": dict(sorted(self.files.items())),
        }


class CoreMLReader(PayloadReader):
    """The Core ML delegate's payloads (:mod:`ptebuild.runtime.payloads`): a model holds its
    weights (no key); a reference needs the named data it names."""

    delegate_id = BACKEND_ID
    name = "Core ML"
    describes_contents = True

    def keys(self, payload: DelegatePayload) -> frozenset[str]:
        reference = read_reference(payload.head(_REFERENCE_HEAD), payload.where)
        return frozenset() if reference is None else frozenset({reference.key})

    def describe(self, payload: DelegatePayload) -> PayloadInfo:
        model, reference = self._model(payload)
        if reference is None:
            return PayloadInfo((), model.to_json(), model.summary(None))
        contents = {"reference": reference.key, **model.to_json(reference.function)}
        return PayloadInfo((reference.key,), contents,
                           f"in named data {reference.key}: " + model.summary(reference.function))

    def operators(self, payload: DelegatePayload) -> dict[str, int] | None:
        model, reference = self._model(payload)
        function = model.function(reference.function if reference else None)
        return dict(function.operations) if function else None

    def weights_bytes(self, payload: DelegatePayload) -> int | None:
        if read_reference(payload.head(_REFERENCE_HEAD), payload.where) is not None:
            return None  # the model, weights and all, is the .pte's named data
        return sum(size for path, size in read_model(payload.blob).files.items() if "/weights/" in f"/{path}")

    def _model(self, payload: DelegatePayload) -> tuple[CoreMLModel, Reference | None]:
        """The model the payload holds or names (FormatError if a named one is missing)."""
        reference = read_reference(payload.head(_REFERENCE_HEAD), payload.where)
        if reference is None:
            return read_model(payload.blob), None
        shared = payload.named_blob(reference.key)
        if shared is None:
            raise FormatError(f"{payload.where}: refers to named data {reference.key!r}, which the .pte does not hold")
        return read_model(shared), reference


def read_reference(head: bytes, source: str) -> Reference | None:
    """The reference a payload starting with ``head`` holds, None when it is a folder."""
    if not head.startswith(REFERENCE_MAGIC):
        return None
    try:
        data = json.loads(head[len(REFERENCE_MAGIC) :].decode("utf-8"))
        return Reference(str(data["key"]), str(data["functionName"]), int(data.get("version", 1)))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise FormatError(f"{source}: corrupt Core ML reference ({REFERENCE_MAGIC.decode()}): {exc}") from None


def list_files(blob: Blob) -> dict[str, tuple[int, int]]:
    """Path -> ``(offset, size)`` of every file of a flattened folder (the index at its end)."""
    return _walk(blob)[0]


def list_folders(blob: Blob) -> list[str]:
    """The path of every folder of a flattened folder, empty ones too (a package without weights
    keeps an empty ``weights`` folder, which its ``Manifest.json`` names), the top one as ``""``."""
    return _walk(blob)[1]


def _walk(blob: Blob) -> tuple[dict[str, tuple[int, int]], list[str]]:
    nodes, index_start = _read_index(blob)
    files: dict[str, tuple[int, int]] = {}
    folders: list[str] = []
    seen: set[int] = set()

    def walk(i: int, prefix: str) -> None:
        if not 0 <= i < len(nodes) or i in seen:
            raise FormatError(f"{blob.source}: corrupt Core ML folder index: node {i} (of {len(nodes)}) named twice or missing")
        seen.add(i)
        node = nodes[i]
        try:
            kind = node["kind"]
            if kind == FILE:
                offset, size = int(node["dataRegion"]["offset"]), int(node["dataRegion"]["size"])
                if offset < 0 or size < 0 or offset + size > index_start:
                    raise FormatError(
                        f"{blob.source}: corrupt Core ML folder: file {prefix!r} [{offset}, {offset + size}) "
                        f"overlaps the index at {index_start}"
                    )
                files[prefix] = (offset, size)
            elif kind == FOLDER:
                folders.append(prefix)
                for name, child in sorted(node["children"].items()):
                    walk(int(child), f"{prefix}/{name}" if prefix else str(name))
            else:
                raise FormatError(f"{blob.source}: corrupt Core ML folder index: node {i} has kind {kind!r}")
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise FormatError(f"{blob.source}: corrupt Core ML folder index: node {i}: {exc!r}") from None

    walk(len(nodes) - 1, "")
    return files, folders


def read_model(blob: Blob) -> CoreMLModel:
    """Read a flattened Core ML folder: its files, ``metadata.json`` and the model's description.

    Raises FormatError for a payload that is not one, or a corrupt index, metadata or model.
    """
    regions = list_files(blob)
    if METADATA_FILE not in regions:
        raise FormatError(f"{blob.source}: Core ML folder without {METADATA_FILE} (files: {', '.join(sorted(regions))})")
    raw = blob.read(*regions[METADATA_FILE], METADATA_FILE)
    try:
        metadata = json.loads(raw.decode("utf-8"))
        if not isinstance(metadata, dict):
            raise ValueError("not an object")
    except (ValueError, UnicodeDecodeError) as exc:
        raise FormatError(f"{blob.source}: corrupt {METADATA_FILE}: {exc}") from None
    files = {path: size for path, (_, size) in regions.items()}
    if MODEL_SPEC_FILE not in regions:
        if any(path.startswith(COMPILED_MODEL_DIR + "/") for path in regions):
            return CoreMLModel(files, metadata, None, (), "main")
        raise FormatError(f"{blob.source}: Core ML folder without {MODEL_SPEC_FILE}")
    spec = Message(blob.read(*regions[MODEL_SPEC_FILE], MODEL_SPEC_FILE), f"{blob.source}: {MODEL_SPEC_FILE}", "Model")
    version, functions, default = read_specification(spec)
    return CoreMLModel(files, metadata, version, functions, default)


def read_specification(spec: Message) -> tuple[int, tuple[ModelFunction, ...], str]:
    """``(specificationVersion, functions, default function)`` of a ``Model`` message."""
    version = spec.uint(1, "specificationVersion")
    description = spec.message(2, "description") or Message(b"", spec.source, "Model.description")
    program = spec.message(502, "mlProgram")
    ops_by_function = _mil_operations(program) if program is not None else {}
    described = description.messages(20, "functions")
    if described:
        functions = tuple(
            ModelFunction(
                fn.string(1, "name"),
                tuple(_feature(f) for f in fn.messages(2, "input")),
                tuple(_feature(f) for f in fn.messages(3, "output")),
                ops_by_function.get(fn.string(1, "name"), {}),
            )
            for fn in described
        )
        default = description.string(21, "defaultFunctionName") or functions[0].name
        return version, functions, default
    main = ModelFunction(
        "main",
        tuple(_feature(f) for f in description.messages(1, "input")),
        tuple(_feature(f) for f in description.messages(10, "output")),
        ops_by_function.get("main", {}),
    )
    return version, (main,), "main"


def _feature(message: Message) -> Feature:
    name = message.string(1, "name")
    kind_message = message.message(3, "type")
    if kind_message is None:
        return Feature(name, "none")
    for number, kind in _FEATURE_KINDS.items():
        if not kind_message.has(number):
            continue
        array = kind_message.message(number, kind + "Type")
        if kind == "state" and array is not None:
            array = array.message(1, "arrayType")
        if kind not in ("multiArray", "state") or array is None:
            return Feature(name, kind)
        code = array.uint(2, "dataType")
        ranges = None
        shape_range = array.message(31, "shapeRange")
        if shape_range is not None:
            ranges = tuple((r.uint(1, "lowerBound"), r.sint(2, "upperBound")) for r in shape_range.messages(1, "sizeRanges"))
        enumerated = None
        listed = array.message(21, "enumeratedShapes")
        if listed is not None:
            enumerated = tuple(tuple(s.ints(1, "shape")) for s in listed.messages(1, "shapes"))
        return Feature(name, kind, ARRAY_DTYPES.get(code, f"type {code}"), tuple(array.ints(1, "shape")), ranges, enumerated)
    return Feature(name, "unknown")


def _mil_operations(program: Message) -> dict[str, dict[str, int]]:
    """Function name -> MIL operation type -> count, in the block of the function's opset."""
    out = {}
    for name, function in program.map(2, "functions").items():
        blocks = function.map(3, "block_specializations")
        block = blocks.get(function.string(2, "opset")) or next(iter(blocks.values()), None)
        counts: Counter[str] = Counter()
        if block is not None:
            _count_operations(block, counts)
        out[name] = dict(counts)
    return out


def _count_operations(block: Message, counts: Counter[str]) -> None:
    for operation in block.messages(3, "operations"):
        counts[operation.string(1, "type")] += 1
        for nested in operation.messages(4, "blocks"):
            _count_operations(nested, counts)


def _read_index(blob: Blob) -> tuple[list[dict[str, Any]], int]:
    """The index's nodes and the offset where it starts (read backwards from the last byte)."""
    length = min(_TAIL_READ, blob.size)
    while True:
        tail = blob.read(blob.size - length, length, "Core ML folder index")[::-1]
        if not tail.startswith(b"{"):
            raise FormatError(f"{blob.source}: not a Core ML folder: no byte-reversed JSON index at its end")
        # A multi-byte character cut at the read's start only garbles what lies past the index.
        text = tail.decode("utf-8", errors="replace")
        try:
            index, end = json.JSONDecoder().raw_decode(text)
        except ValueError as exc:
            if length == blob.size:
                raise FormatError(f"{blob.source}: corrupt Core ML folder index: {exc}") from None
            length = min(blob.size, length * 4)
            continue
        break
    nodes = index.get("nodes") if isinstance(index, dict) else None
    if not isinstance(nodes, list) or not nodes or not all(isinstance(n, dict) for n in nodes):
        raise FormatError(f"{blob.source}: corrupt Core ML folder index: no nodes")
    index_size = len(text[:end].encode("utf-8"))
    return nodes, blob.size - index_size


READERS: tuple[PayloadReader, ...] = (CoreMLReader(),)
"""What this module reads: :data:`ptebuild.runtime.payloads.READER_MODULES` takes it, and the
backend declares it (``Backend.payload_readers``)."""
