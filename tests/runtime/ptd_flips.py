"""Corrupt copies of a ``.ptd`` for the readers' robustness tests."""

from __future__ import annotations

from collections.abc import Iterator

from ptebuild.runtime.ptd_file import HEADER, HEADER_OFFSET


def flatbuffer_flips(raw: bytes) -> Iterator[bytes]:
    """``raw`` with one byte of its flatbuffer (header included) inverted, for each byte in turn."""
    _, _, fb_offset, fb_size, _, _ = HEADER.unpack_from(raw, HEADER_OFFSET)
    for position in range(fb_offset + fb_size):
        corrupt = bytearray(raw)
        corrupt[position] ^= 0xFF
        yield bytes(corrupt)
