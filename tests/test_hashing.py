import hashlib
import os

import pytest

from ptebuild import hashing

SIZES = [0, 1, hashing.BUF_SIZE - 1, hashing.BUF_SIZE, hashing.BUF_SIZE + 1, 3 * hashing.BUF_SIZE + 7]


@pytest.mark.parametrize("size", SIZES)
def test_hash_file_matches_hashlib(tmp_path, size):
    data = os.urandom(size)
    path = tmp_path / "f"
    path.write_bytes(data)
    assert hashing.hash_file(path) == (hashlib.sha256(data).hexdigest(), size)


@pytest.mark.parametrize("size", SIZES)
def test_copy_fd_copies_and_hashes(tmp_path, size):
    data = os.urandom(size)
    (tmp_path / "src").write_bytes(data)
    src = os.open(tmp_path / "src", os.O_RDONLY)
    dst = os.open(tmp_path / "dst", os.O_WRONLY | os.O_CREAT)
    try:
        assert hashing.copy_fd(src, dst) == (hashlib.sha256(data).hexdigest(), size)
    finally:
        os.close(src)
        os.close(dst)
    assert (tmp_path / "dst").read_bytes() == data


def test_buffer_is_reused():
    assert hashing.buffer().obj is hashing.buffer().obj


@pytest.mark.parametrize(
    "value, ok",
    [
        ("a" * 64, True),
        ("0123456789abcdef" * 4, True),
        ("A" * 64, False),
        ("a" * 63, False),
        ("g" * 64, False),
        (None, False),
    ],
)
def test_is_digest(value, ok):
    assert hashing.is_digest(value) is ok
