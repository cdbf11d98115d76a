"""What ptebuild reads of a delegate's payload, and the readers that read it: declared by backends.

A delegate's payload (``BackendDelegate.processed`` in a ``.pte``) has a format of its backend's
own. Each backend declares one :class:`PayloadReader` per delegate id it writes
(:attr:`ptebuild.backends.base.Backend.payload_readers`; the id is what a ``.pte`` calls the
delegate, ``BackendDelegate.id``). ptebuild's own backends' readers are the modules of
:mod:`ptebuild.runtime.payload_readers`; an installed plug-in's are its backend's, built on this
module's classes. :mod:`ptebuild.runtime.payload_lookup` finds the reader of an id. A delegate
whose id no backend declares is *opaque*: its keys cannot be listed.

What a reader answers, from the payload alone (and the ``.pte``'s named data), in pure Python;
each is optional (the defaults say "cannot tell"):

=====================  ======================================================================
``keys``               the named-data keys the payload needs at load: every one must be in the
                       ``.pte`` or the ``.ptd`` (:func:`ptebuild.runtime.loader.check`,
                       :attr:`~ptebuild.runtime.pte_file.PteFile.required_keys`); ``None``:
                       it cannot list them (opaque)
``describe``           what ``ptebuild inspect`` shows of it (:class:`PayloadInfo`: keys, what
                       it holds as JSON, one line); default: its keys
``operators``          what the delegate runs, operator name -> count (``ptebuild.runtime.oplist``:
                       beside the kernels the runtime registers, the delegated work)
``weights_bytes``      the bytes of weights inside the payload itself (its size, split)
``key_sha256``         the SHA-256 a key of this delegate promises for its bytes, where the key
                       has a form of its own (``verify_bytes`` checks every blob against it)
=====================  ======================================================================

A payload a reader cannot parse raises :class:`~ptebuild.errors.FormatError` naming it
(:attr:`DelegatePayload.where`). Structural checks of programs that cannot run here share
:mod:`ptebuild.lowering.structure`, which finds a method's delegate calls by their reader's id.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ptebuild.runtime.file_region import Blob


@dataclass(frozen=True)
class PayloadInfo:
    """What ``ptebuild inspect`` shows of a payload (:class:`~ptebuild.runtime.inspection.DelegateInfo`)."""

    keys: tuple[str, ...] | None = None
    """The named-data keys it needs, sorted (None: the reader cannot list them)."""
    contents: dict[str, Any] | None = None
    """What it holds, as JSON (layers, operators, inputs and outputs...), None if not described."""
    summary: str | None = None
    """``contents`` in one line, for the text of ``ptebuild inspect``."""


class DelegatePayload:
    """One delegate's payload in a ``.pte``, read on request: what a reader is given.

    ``where`` names it in messages (``model.pte: method 'forward' delegate 0 (<delegate id>)``);
    :meth:`read` takes offsets relative to the payload's start (a range past its end is a
    FormatError); :meth:`named_blob` finds the ``.pte``'s own named data (a payload that refers
    to data shared by several delegates).
    """

    def __init__(self, delegate_id: str, method: str, index: int, where: str, blob: Blob,
                 named_blob: Callable[[str], Blob | None]) -> None:
        self.delegate_id = delegate_id
        self.method = method
        self.index = index
        self.where = where
        self.blob = blob
        self._named_blob = named_blob

    @property
    def size(self) -> int:
        return self.blob.size

    def read(self, offset: int, size: int, what: str) -> bytes:
        return self.blob.read(offset, size, what)

    def head(self, size: int) -> bytes:
        """The first ``size`` bytes (fewer if the payload is shorter)."""
        return self.blob.read(0, min(size, self.blob.size), "head")

    def whole(self) -> bytes:
        """All of it (for formats read whole; a large payload is better read by parts)."""
        return self.blob.whole("payload")

    def named_blob(self, key: str) -> Blob | None:
        """The ``.pte``'s named data ``key``, None when the ``.pte`` holds no such key."""
        return self._named_blob(key)


class PayloadReader:
    """Reads the payloads of one delegate id (see the module docstring). Subclass it and override
    what the format tells; an instance is declared by its backend (``payload_readers``)."""

    delegate_id: str = ""
    """The id the ``.pte`` names the delegate by (``BackendDelegate.id``)."""
    name: str = ""
    """The format's name in messages; default: the id."""
    describes_contents: bool = False
    """True if :meth:`describe` says what the payload holds (a failure to parse is then noted as
    "cannot read", else as "cannot list the keys of")."""

    def __init__(self, delegate_id: str | None = None, name: str | None = None) -> None:
        if delegate_id is not None:
            self.delegate_id = delegate_id
        if name is not None:
            self.name = name
        if not self.name:
            self.name = self.delegate_id

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self.delegate_id}>"

    def keys(self, payload: DelegatePayload) -> frozenset[str] | None:
        """The named-data keys the payload needs; None if this reader cannot list them."""
        return None

    def describe(self, payload: DelegatePayload) -> PayloadInfo:
        """What ``ptebuild inspect`` shows (default: the keys)."""
        keys = self.keys(payload)
        return PayloadInfo(None if keys is None else tuple(sorted(keys)))

    def operators(self, payload: DelegatePayload) -> dict[str, int] | None:
        """Operator name -> how many times the delegate runs it; None if the format does not say."""
        return None

    def weights_bytes(self, payload: DelegatePayload) -> int | None:
        """The bytes of weights the payload holds itself; None if the format does not say."""
        return None

    def is_code(self, key: str) -> bool:
        """True for a named-data key of this delegate that holds compiled code, not weights (CUDA's
        AOTInductor library): counted as the ``.pte``'s ``compiled code``, never as weights."""
        return False

    def key_sha256(self, key: str) -> str | None:
        """The hex SHA-256 ``key`` promises for its bytes, for keys of this delegate's own form
        (the generic forms are :func:`ptebuild.runtime.keys.sha256_in_key`'s); None otherwise."""
        return None


# -- the readers, found through the backend registry --------------------------------------------
