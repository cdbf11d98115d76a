"""Which reader reads a delegate's payload: found by its delegate id, ptebuild's own readers first.

ptebuild's own backends' readers are the modules of :mod:`ptebuild.runtime.payload_readers`
(:data:`READER_MODULES`); an installed plug-in's are its backend's ``payload_readers``
(:mod:`ptebuild.backend_registry`). :func:`reader_for` loads them in that order until one reads
the id, each module imported only when a delegate of an id not met yet is read (none imports
torch or pydantic, so ``inspect`` and ``verify`` stay cheap). What a reader is:
:mod:`ptebuild.runtime.payloads`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ptebuild.runtime.payloads import PayloadReader

READER_MODULES = (
    "ptebuild.runtime.payload_readers.xnnpack",
    "ptebuild.runtime.payload_readers.cuda",
    "ptebuild.runtime.payload_readers.openvino",
    "ptebuild.runtime.payload_readers.coreml",
    "ptebuild.runtime.payload_readers.vulkan",
)
"""The modules of ptebuild's own readers (each defines ``READERS``), in the order they are tried."""

_readers: dict[str, PayloadReader] = {}
_pending: Iterator[Any] | None = None
_problems: list[str] = []


def reader_for(delegate_id: str) -> PayloadReader | None:
    """The reader of ``delegate_id``, or None when no backend declares one (the payload is opaque).

    ptebuild's reader modules, then the plug-ins' backends, are loaded in order until one declares
    the id; a plug-in that cannot be loaded is passed over (:func:`problems`)."""
    while delegate_id not in _readers and _load_next():
        pass
    return _readers.get(delegate_id)


def readers() -> dict[str, PayloadReader]:
    """Every declared reader, by delegate id (loads every backend)."""
    while _load_next():
        pass
    return dict(_readers)


def problems() -> list[str]:
    """One line for each backend whose readers could not be had (a plug-in that does not load)."""
    return list(_problems)


def key_sha256(key: str) -> str | None:
    """The SHA-256 ``key`` promises, for the key forms a reader declares (see :class:`PayloadReader`)."""
    for reader in readers().values():
        digest = reader.key_sha256(key)
        if digest is not None:
            return digest
    return None


def _sources() -> Iterator[str | Any]:
    """ptebuild's reader modules, then the plug-ins' registry entries."""
    yield from READER_MODULES
    from ptebuild import backend_registry

    yield from backend_registry.plugins().entries.values()


def _load_next() -> bool:
    """Load the next reader module or plug-in backend and take its readers; False when none is left."""
    global _pending
    import importlib

    from ptebuild import backend_registry
    from ptebuild.errors import PluginError

    if _pending is None:
        _pending = _sources()
    entry = next(_pending, None)
    if entry is None:
        return False
    if isinstance(entry, str):
        for reader in importlib.import_module(entry).READERS:
            _readers.setdefault(reader.delegate_id, reader)
        return True
    try:
        declared = getattr(backend_registry.load(entry), "payload_readers", ())
    except PluginError as exc:
        _problems.append(str(exc))
        return True
    found = list(declared) if isinstance(declared, (list, tuple)) else [declared]
    for reader in found:
        if not isinstance(reader, PayloadReader) or not reader.delegate_id:
            _problems.append(f"{entry.describe()}: payload_readers holds {reader!r}, not a PayloadReader with a "
                             "delegate_id; left out")
            continue
        _readers.setdefault(reader.delegate_id, reader)
    return True
