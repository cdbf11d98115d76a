"""Reading .ptd (FlatTensor) files: keys, offsets, blobs, and malformed files as FormatError."""

from __future__ import annotations

import hashlib

import pytest
from ptd_flips import flatbuffer_flips
from runtime_programs import patched

from ptebuild.errors import FormatError
from ptebuild.runtime.ptd_file import HEADER, HEADER_OFFSET, read_ptd, read_ptd_header


def test_entries_point_at_the_blobs(programs):
    ptd = read_ptd(programs.a.ptd)
    raw = programs.a.ptd.read_bytes()
    assert ptd.version == 0
    assert len(ptd.entries) == 4
    for key, entry in ptd.entries.items():
        blob = raw[entry.offset : entry.offset + entry.size]
        assert ptd.read_blob(key) == blob
        assert key.endswith(hashlib.sha256(blob).hexdigest())
    digests = ptd.sha256_by_segment()
    assert sorted(digests.values()) == sorted(key.rsplit(":", 1)[1] for key in ptd.keys)


def test_every_truncation_is_a_format_error(programs, tmp_path):
    raw = programs.a.ptd.read_bytes()
    cut = tmp_path / "cut.ptd"
    for length in range(len(raw)):
        cut.write_bytes(raw[:length])
        with pytest.raises(FormatError, match="cut.ptd"):
            read_ptd(cut)


def test_every_flipped_flatbuffer_byte_is_read_or_refused(programs, tmp_path):
    """Corrupt offsets and lengths must surface as FormatError, never IndexError/struct.error."""
    raw = programs.a.ptd.read_bytes()
    bad = tmp_path / "bad.ptd"
    for corrupt in flatbuffer_flips(raw):
        bad.write_bytes(corrupt)
        try:
            read_ptd(bad)
        except FormatError:
            pass


BAD_HEADERS = [
    ("identifier", lambda raw: patched(raw, 4, "4s", b"XX01"),
     r"not a \.ptd file: identifier b'XX01' at offset 4, expected b'FT01'"),
    ("magic", lambda raw: patched(raw, 8, "4s", b"FH99"),
     r"bad FlatTensor header at offset 8: magic b'FH99' length 40"),
    ("length", lambda raw: patched(raw, 12, "<I", 8),
     r"bad FlatTensor header at offset 8: magic b'FH01' length 8"),
    ("segment data past end", lambda raw: patched(raw, 40, "<Q", 1 << 40),
     r"truncated: segment data ends at offset \d+, file has \d+ bytes"),
    ("flatbuffer past end", lambda raw: patched(raw, 24, "<Q", 1 << 20),
     r"truncated: cannot read FlatTensor flatbuffer \(\d+ bytes\) at offset 0"),
    ("empty", lambda raw: b"",
     r"truncated: cannot read FlatTensor header \(48 bytes\) at offset 0, file has 0 bytes"),
]


@pytest.mark.parametrize("make, message", [b[1:] for b in BAD_HEADERS], ids=[b[0] for b in BAD_HEADERS])
def test_bad_headers(programs, tmp_path, make, message):
    bad = tmp_path / "bad.ptd"
    bad.write_bytes(make(programs.a.ptd.read_bytes()))
    with pytest.raises(FormatError, match=f"^{bad}: {message}"):
        read_ptd(bad)


def test_a_pte_is_not_a_ptd(programs):
    with pytest.raises(FormatError, match=r"identifier b'ET12' at offset 4, expected b'FT01'"):
        read_ptd(programs.a.pte)


def test_header_as_stored(programs, tmp_path):
    raw = programs.a.ptd.read_bytes()
    header = read_ptd_header(programs.a.ptd)
    stored = (header.magic, header.length, header.flatbuffer_offset, header.flatbuffer_size)
    assert (*stored, header.segment_base, header.segment_data_size) == HEADER.unpack_from(raw, HEADER_OFFSET)
    assert header.magic == b"FH01" and header.file_size == len(raw)
    end = header.segment_base + header.segment_data_size
    assert all(header.segment_base <= e.offset and e.offset + e.size <= end for e in read_ptd(programs.a.ptd).entries.values())
    short = tmp_path / "short.ptd"
    short.write_bytes(raw[:10])
    message = r"truncated: cannot read FlatTensor header \(48 bytes\) at offset 0, file has 10 bytes"
    with pytest.raises(FormatError, match=message):
        read_ptd_header(short)
