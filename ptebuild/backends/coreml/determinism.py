"""Byte-reproducible Core ML payloads: what ExecuTorch 1.5.1 and coremltools 9.0 leave to chance.

Two exports of one model by upstream's code differ (seen: 583 bytes of a Linear+ReLU program):

1. ``metadata.json``'s ``identifier``, ``"executorch_" + str(uuid.uuid4())``
   (``CoreMLBackend.preprocess_model`` and ``preprocess_multimethod``). The device's Core ML
   delegate caches the model it compiles under this identifier, so it must differ between
   models: it becomes ``"executorch_" + uuid5(NAMESPACE, <SHA-256 of the folder's files>)``,
   derived from what the model is (every file's path and bytes, ``metadata.json`` without the
   identifier). A multifunction model is also named data of the ``.pte`` under
   ``coreml_<identifier>``, referred to by every method's ``CMJR`` payload: key and references
   follow the new identifier.
2. ``model.mlpackage/Manifest.json``'s item identifiers: random UUIDs from coremltools' C++
   ``ModelPackage``, which also order the JSON. They become ``uuid5(NAMESPACE, <item path>)``
   (``rootModelIdentifier`` too), written as coremltools writes it (4-space indent, sorted keys,
   a final newline).
3. ``model.mlmodel``: the ``Model`` protobuf serialized without ``deterministic=True``, so its
   maps (the metadata's ``userDefined``) come out in a per-process order. Serialized again with
   ``deterministic=True``.
4. ``userDefined["com.github.apple.coremltools.conversion_date"]``: today's date. Removed (the
   model keeps coremltools' version and source entries).

:func:`reproducible_payloads` applies these during a lowering (the backend's
``lowering_context``), by wrapping the flatten step (``coreml_preprocess.executorchcoreml``) so
that the folder is normalised just before it becomes the payload, and by renaming the
multifunction keys once ``preprocess_multimethod`` returns; both are restored on exit.
``uuid.uuid4`` itself is left alone: ``preprocess_model`` also names its temporary folder after
the identifier, which must stay unique between concurrent lowerings.

A compiled model (``model.mlmodelc``, macOS only) is not normalised: its files are Apple's.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

NAMESPACE = uuid.UUID("0b5e7a4c-2f1d-5c3e-9a8b-7074656275c1")
"""Fixed namespace of ptebuild's Core ML identifiers (uuid5): any fixed value would do."""
IDENTIFIER_PREFIX = "executorch_"
NAMED_DATA_PREFIX = "coreml_"
REFERENCE_MAGIC = b"CMJR"
CONVERSION_DATE = "com.github.apple.coremltools.conversion_date"
PACKAGE = "model.mlpackage"
METADATA = "metadata.json"


def content_identifier(folder: Path) -> str:
    """``executorch_<uuid5>`` of every file under ``folder`` (paths and bytes, sorted by path),
    ``metadata.json`` counted without its identifier."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder).as_posix()
        data = path.read_bytes()
        if relative == METADATA:
            metadata = json.loads(data)
            metadata.pop("identifier", None)
            data = json.dumps(metadata, sort_keys=True).encode()
        digest.update(relative.encode() + b"\0" + hashlib.sha256(data).digest())
    return IDENTIFIER_PREFIX + str(uuid.uuid5(NAMESPACE, digest.hexdigest()))


def normalise_package(package: Path) -> None:
    """Item identifiers of ``Manifest.json`` from their paths; ``model.mlmodel`` without the
    conversion date, serialized deterministically."""
    from coremltools.proto import Model_pb2

    manifest_path = package / "Manifest.json"
    manifest = json.loads(manifest_path.read_text())
    items = manifest.get("itemInfoEntries", {})
    renamed = {old: str(uuid.uuid5(NAMESPACE, item["path"])) for old, item in items.items()}
    manifest["itemInfoEntries"] = {renamed[old]: item for old, item in items.items()}
    if manifest.get("rootModelIdentifier") in renamed:
        manifest["rootModelIdentifier"] = renamed[manifest["rootModelIdentifier"]]
    manifest_path.write_text(json.dumps(manifest, indent=4, sort_keys=True) + "\n")
    for item in items.values():
        if not item["path"].endswith(".mlmodel"):
            continue
        spec_path = package / "Data" / item["path"]
        spec = Model_pb2.Model()
        spec.ParseFromString(spec_path.read_bytes())
        user_defined = spec.description.metadata.userDefined
        if CONVERSION_DATE in user_defined:
            del user_defined[CONVERSION_DATE]
        spec_path.write_bytes(spec.SerializeToString(deterministic=True))


def normalise_folder(folder: Path, renamed: dict[str, str]) -> None:
    """Normalise a Core ML folder about to be flattened; record its identifier's new name in
    ``renamed`` (old -> new)."""
    package = folder / PACKAGE
    if package.is_dir():
        normalise_package(package)
    metadata_path = folder / METADATA
    if not metadata_path.is_file():
        return
    metadata = json.loads(metadata_path.read_text())
    identifier = content_identifier(folder)
    old = metadata.get("identifier")
    if old:
        renamed[old] = identifier
    metadata["identifier"] = identifier
    # As CoreMLBackend.save_model_metadata writes it: json.dumps of the dataclass, keys in order.
    metadata_path.write_text(json.dumps(metadata))


class _NormalisingFlattener:
    """Stands in for the ``executorchcoreml`` extension module during a lowering: normalises a
    folder, then lets the real extension flatten it."""

    def __init__(self, real: Any, renamed: dict[str, str]) -> None:
        self._real = real
        self._renamed = renamed

    def flatten_directory_contents(self, path: str) -> bytes:
        normalise_folder(Path(path), self._renamed)
        return self._real.flatten_directory_contents(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def renamed_references(results: dict[str, list[Any]], renamed: dict[str, str]) -> dict[str, list[Any]]:
    """``preprocess_multimethod``'s results with each ``coreml_<identifier>`` key (named data and
    ``CMJR`` references) following the identifier's new name."""
    import dataclasses

    from executorch.exir._serialize._named_data_store import NamedDataStoreOutput

    def new_key(key: str) -> str:
        if key.startswith(NAMED_DATA_PREFIX) and key[len(NAMED_DATA_PREFIX):] in renamed:
            return NAMED_DATA_PREFIX + renamed[key[len(NAMED_DATA_PREFIX):]]
        return key

    outputs: dict[int, Any] = {}
    out: dict[str, list[Any]] = {}
    for method, method_results in results.items():
        out[method] = []
        for result in method_results:
            changes: dict[str, Any] = {}
            if result.processed_bytes.startswith(REFERENCE_MAGIC):
                reference = json.loads(result.processed_bytes[len(REFERENCE_MAGIC):])
                reference["key"] = new_key(reference["key"])
                changes["processed_bytes"] = REFERENCE_MAGIC + json.dumps(reference).encode("utf-8")
            store = result.data_store_output
            if store is not None:
                if id(store) not in outputs:  # one output shared by every method's results
                    outputs[id(store)] = NamedDataStoreOutput(
                        store.buffers, {new_key(k): v for k, v in store.pte_data.items()}, store.external_data
                    )
                changes["data_store_output"] = outputs[id(store)]
            out[method].append(dataclasses.replace(result, **changes) if changes else result)
    return out


@contextmanager
def reproducible_payloads() -> Iterator[None]:
    """During the block, Core ML payloads are normalised as the module says (nothing outlives it)."""
    from executorch.backends.apple.coreml.compiler import coreml_preprocess

    backend = coreml_preprocess.CoreMLBackend
    real_flattener = coreml_preprocess.executorchcoreml
    real_multimethod = backend.__dict__["preprocess_multimethod"]
    renamed: dict[str, str] = {}

    def preprocess_multimethod(cls, edge_programs, compile_specs):
        return renamed_references(real_multimethod.__func__(cls, edge_programs, compile_specs), renamed)

    coreml_preprocess.executorchcoreml = _NormalisingFlattener(real_flattener, renamed)
    backend.preprocess_multimethod = classmethod(preprocess_multimethod)
    try:
        yield
    finally:
        coreml_preprocess.executorchcoreml = real_flattener
        backend.preprocess_multimethod = real_multimethod
