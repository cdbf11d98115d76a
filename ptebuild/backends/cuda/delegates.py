"""The CUDA delegates of a ``.pte``, their payloads decoded, and the named data they point to (the
compiled shared library): what the GPU check, the Windows DLL check and the runtime shims read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ptebuild.runtime.payload_readers.cuda import BACKEND_ID, CudaPayload, decode
from ptebuild.runtime.pte_file import open_pte


@dataclass(frozen=True)
class CudaDelegate:
    """A CUDA delegate of a ``.pte``: its method, index among the method's delegates, payload."""

    method: str
    index: int
    payload: CudaPayload


def read_cuda_delegates(path: str | Path) -> list[CudaDelegate]:
    """Every CUDA delegate of the ``.pte`` at ``path``, with its payload decoded.

    Raises FormatError for a corrupt ``.pte`` or payload (message names file and method).
    """
    found = []
    with open_pte(path) as pte:
        for plan in pte.execution_plans():
            name = plan.name()
            for delegate in plan.delegates():
                if delegate.backend() == BACKEND_ID:
                    payload = pte.payload(name, delegate)
                    found.append(CudaDelegate(name, delegate.index, decode(payload.whole(), payload.where)))
    return found


def read_pte_named_data(path: str | Path, key: str) -> bytes:
    """The bytes the ``.pte`` at ``path`` stores in its own named data under ``key``.

    Raises:
        FormatError: corrupt file; KeyError: no such key in the ``.pte``.
    """
    with open_pte(path) as pte:
        blob = pte.named_blob(key)
        if blob is None:
            raise KeyError(key)
        return blob.whole(f"named data {key!r}")
