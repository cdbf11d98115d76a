"""Reading .pte files without executing them: methods, needed keys, malformed files as FormatError."""

from __future__ import annotations

import subprocess
import sys

import pytest
from runtime_programs import patched

from ptebuild.errors import FormatError
from ptebuild.runtime.ptd_file import read_ptd
from ptebuild.runtime.pte_file import EXTENDED_HEADER, EXTENDED_HEADER_OFFSET, read_pte


def test_portable_program_needs_its_external_tensors(programs):
    pte = read_pte(programs.a.pte)
    assert pte.method_names == ("forward",)
    assert pte.external_tensor_keys == read_ptd(programs.a.ptd).keys
    assert not pte.delegate_keys and not pte.named_data_keys and not pte.opaque_delegates


def test_xnnpack_program_needs_the_keys_of_its_delegate_blob(programs):
    pte = read_pte(programs.xa.pte)
    assert not pte.external_tensor_keys
    assert pte.delegate_keys == read_ptd(programs.xa.ptd).keys
    assert pte.required_keys == pte.delegate_keys


def test_keys_stored_inside_the_pte_are_not_needed_from_outside(programs):
    pte = read_pte(programs.xinline.pte)
    assert programs.xinline.ptds == ()
    assert pte.delegate_keys and pte.delegate_keys <= pte.named_data_keys
    assert pte.required_keys == frozenset()


def test_all_methods_are_listed(programs):
    assert read_pte(programs.multi.pte).method_names == ("doubled", "forward")


@pytest.mark.parametrize("name", ["a", "xa", "xinline"])
def test_every_truncation_is_a_format_error(programs, tmp_path, name):
    raw = getattr(programs, name).pte.read_bytes()
    cut = tmp_path / "cut.pte"
    for length in range(len(raw)):
        cut.write_bytes(raw[:length])
        with pytest.raises(FormatError, match="cut.pte"):
            read_pte(cut)


@pytest.mark.parametrize("name", ["a", "xa"])
def test_every_flipped_byte_is_read_or_refused(programs, tmp_path, name):
    """Corrupt offsets and lengths must surface as FormatError, never IndexError/struct.error."""
    raw = getattr(programs, name).pte.read_bytes()
    bad = tmp_path / "bad.pte"
    for position in range(len(raw)):
        corrupt = bytearray(raw)
        corrupt[position] ^= 0xFF
        bad.write_bytes(corrupt)
        try:
            read_pte(bad)
        except FormatError:
            pass


BAD_HEADERS = [
    ("identifier", lambda raw: patched(raw, 4, "4s", b"ET11"),
     r"not a \.pte file: identifier b'ET11' at offset 4, expected b'ET12'"),
    ("header length", lambda raw: patched(raw, 12, "<I", 8),
     r"bad extended header at offset 8: length 8"),
    ("program past end", lambda raw: patched(raw, 16, "<Q", 1 << 40),
     r"truncated: header promises \d+ bytes of program"),
    ("root offset past end", lambda raw: patched(raw, 0, "<I", 1 << 30),
     r"truncated or corrupt: cannot read Program vtable offset \(4 bytes\) at offset \d+"),
    ("empty", lambda raw: b"", r"truncated: 0 bytes, too short for a \.pte"),
]


@pytest.mark.parametrize("make, message", [b[1:] for b in BAD_HEADERS], ids=[b[0] for b in BAD_HEADERS])
def test_bad_headers(programs, tmp_path, make, message):
    raw = programs.xa.pte.read_bytes()  # a program with segments has the extended header
    assert raw[EXTENDED_HEADER_OFFSET : EXTENDED_HEADER_OFFSET + 4] == b"eh00"
    assert EXTENDED_HEADER.size == 24
    bad = tmp_path / "bad.pte"
    bad.write_bytes(make(raw))
    with pytest.raises(FormatError, match=f"^{bad}: {message}"):
        read_pte(bad)


def test_a_ptd_is_not_a_pte(programs):
    with pytest.raises(FormatError, match=r"identifier b'FT01' at offset 4, expected b'ET12'"):
        read_pte(programs.a.ptd)


def test_readers_import_neither_torch_nor_executorch(programs):
    code = (
        "import sys\n"
        "from ptebuild.runtime.pte_file import read_pte\n"
        "from ptebuild.runtime.ptd_file import read_ptd\n"
        "import ptebuild.runtime\n"
        f"ptebuild.runtime.check({str(programs.a.pte)!r}, [{str(programs.a.ptd)!r}], verify_bytes=True)\n"
        "print(sorted(m for m in ('torch', 'executorch', 'numpy') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
