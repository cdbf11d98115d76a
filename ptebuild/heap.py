"""This process's memory pages: freed memory given back to the system, huge pages for tensors.

A build worker holds tensors of gigabytes (a language model's weights, upstream's quantized copies
of them) and frees them again. glibc serves an allocation from its heap unless it is at least the
*mmap threshold*, which it raises, up to 32 MiB, each time a block it had mapped is freed: after the
first large tensor is gone, tensors of up to 32 MiB come from the heap, and the heap keeps what is
freed in its middle resident. :func:`return_large_frees` fixes the threshold (``mallopt``), so
that every block of at least that size is mapped and unmapped on its own; :func:`trim` gives back
the free pages the heap holds now (``malloc_trim``). Measured on ExecuTorch's LLM export of a
2-layer decoder of Llama-3.2-1B's widths (8da4w, 8-bit embeddings): peak resident memory 5.70 GiB
with glibc's default, 5.56 GiB with a fixed 128 KiB threshold.

A block mapped afresh is faulted in a 4 KiB page at a time. Upstream's 8da4w quantization (torchao's
HQQ: twenty passes over each weight, each making temporaries of the weight's size) spends most of
its time there: :func:`huge_pages_for_tensors` has torch's CPU allocator ask for transparent huge
pages (2 MiB) for each tensor of 2 MiB or more (PyTorch's own ``THP_MEM_ALLOC_ENABLE``), so a
tensor is faulted in 512 times fewer pieces. Measured here (a Linux VM, transparent huge pages on
``madvise``), HQQ of one Llama-3.2-1B layer's weights (medians of 3): 7.77 s and 5.4 M page faults
with the fixed threshold alone, 5.74 s and 0.73 M with huge pages too; the same values bit for bit
(torch computes the same; only where its pages come from changes).

Elsewhere (not glibc: macOS, musl) the heap's functions do nothing, and torch's allocator asks for
huge pages on Linux only. Imports nothing beyond the standard library.
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any

M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter (``malloc.h``)."""
TORCH_HUGE_PAGES = "THP_MEM_ALLOC_ENABLE"
"""PyTorch's switch (``c10/core/impl/alloc_cpu.cpp``): 2 MiB-aligned, ``madvise(MADV_HUGEPAGE)`` blocks
for tensors of 2 MiB or more. Read once, at torch's first CPU allocation."""
LARGE = 128 << 10
"""The threshold :func:`return_large_frees` fixes: glibc's own starting value."""


@functools.cache
def _libc() -> Any:
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt, libc.malloc_trim  # noqa: B018 (glibc's, or AttributeError)
    except (OSError, AttributeError):
        return None
    return libc


def return_large_frees(threshold: int = LARGE) -> bool:
    """From now on, every allocation of at least ``threshold`` bytes is mapped on its own and given
    back to the system when freed (glibc's dynamic threshold off). True if the allocator took it."""
    libc = _libc()
    return bool(libc is not None and libc.mallopt(M_MMAP_THRESHOLD, threshold) == 1)


def trim() -> None:
    """Give the heap's free pages back to the system now."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def huge_pages_for_tensors() -> None:
    """torch's CPU allocator asks for huge pages for large tensors (:data:`TORCH_HUGE_PAGES`), unless
    the environment already says (``THP_MEM_ALLOC_ENABLE=0``: it does not). torch reads the switch
    at its first allocation: call this before torch is imported."""
    os.environ.setdefault(TORCH_HUGE_PAGES, "1")
