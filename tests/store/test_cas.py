import errno
import hashlib
import os
import stat

import pytest

from ptebuild import hashing
from ptebuild.errors import CorruptObject, StoreError
from ptebuild.store import Store
from ptebuild.store import cas as cas_mod


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "cache")


def _files(folder):
    return sorted(p.name for p in folder.rglob("*") if p.is_file())


def test_put_file_streams_once_and_shards(store, tmp_path):
    data = os.urandom(3 * hashing.BUF_SIZE + 5)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    digest, size = store.cas.put_file(src)
    assert (digest, size) == (hashlib.sha256(data).hexdigest(), len(data))
    blob = store.root / "objects" / digest[:2] / digest[2:]
    assert blob.read_bytes() == data
    assert stat.S_IMODE(blob.stat().st_mode) == 0o444
    assert store.cas.has(digest)
    assert [d for d, _ in store.cas] == [digest]
    assert not [p for p in (store.root / "objects").iterdir() if p.is_file()]  # no temp left


def test_put_file_reads_the_source_once(store, tmp_path, monkeypatch):
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(2 * hashing.BUF_SIZE))
    opened = []
    real_open = os.open

    def counting_open(path, flags, *args, **kwargs):
        if os.fspath(path) == os.fspath(src):
            opened.append(path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting_open)
    store.cas.put_file(src)
    assert len(opened) == 1


def test_put_bytes_and_idempotent(store):
    d1 = store.cas.put_bytes(b"abc")
    d2 = store.cas.put_bytes(b"abc")
    assert d1 == d2 == hashlib.sha256(b"abc").hexdigest()
    assert len(list(store.cas)) == 1


def test_put_heals_a_damaged_blob(store):
    digest = store.cas.put_bytes(b"good bytes")
    blob = store.cas.path(digest)
    os.chmod(blob, 0o644)
    blob.write_bytes(b"bad! bytes")
    store.cas.put_bytes(b"good bytes")
    assert blob.read_bytes() == b"good bytes"


def test_restore_writes_a_private_writable_copy(store, tmp_path):
    digest = store.cas.put_bytes(b"payload" * 1000)
    dest = tmp_path / "out" / "sub" / "model.pte"
    assert store.cas.restore(digest, dest) is True
    assert dest.read_bytes() == b"payload" * 1000
    st = dest.stat()
    assert stat.S_IMODE(st.st_mode) == 0o644
    assert st.st_nlink == 1 and st.st_ino != store.cas.path(digest).stat().st_ino
    assert _files(dest.parent) == ["model.pte"]  # no temp left


def test_restore_keeps_a_matching_dest(store, tmp_path):
    digest = store.cas.put_bytes(b"same")
    dest = tmp_path / "model.pte"
    dest.write_bytes(b"same")
    ino = dest.stat().st_ino
    assert store.cas.restore(digest, dest) is False
    assert dest.stat().st_ino == ino


def test_restore_replaces_a_different_dest_of_the_same_size(store, tmp_path):
    digest = store.cas.put_bytes(b"new!")
    dest = tmp_path / "model.pte"
    dest.write_bytes(b"old!")
    assert store.cas.restore(digest, dest) is True
    assert dest.read_bytes() == b"new!"


def _damage(path, how):
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    if how == "flip":
        data[len(data) // 2] ^= 0x01
    else:
        data = data[: len(data) - 1]
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["flip", "truncate"])
@pytest.mark.parametrize("reflink", [False, True])
def test_restore_detects_removes_and_reports_corruption(store, tmp_path, monkeypatch, how, reflink):
    if reflink:  # take the reflink branch even on a filesystem without FICLONE

        def fake_reflink(src_fd, dst_fd):
            hashing.copy_fd(src_fd, dst_fd)
            return True

        monkeypatch.setattr(cas_mod, "_try_reflink", fake_reflink)
    digest = store.cas.put_bytes(os.urandom(100_000))
    _damage(store.cas.path(digest), how)
    dest = tmp_path / "out" / "model.pte"
    dest.parent.mkdir()
    with pytest.raises(CorruptObject, match=digest):
        store.cas.restore(digest, dest)
    assert not store.cas.has(digest)
    assert not dest.exists()
    assert _files(dest.parent) == []


def test_restore_of_a_missing_blob_is_corrupt(store, tmp_path):
    with pytest.raises(CorruptObject, match="a" * 64):
        store.cas.restore("a" * 64, tmp_path / "x")


def test_bad_digest_is_refused(store, tmp_path):
    with pytest.raises(StoreError, match="not a SHA-256"):
        store.cas.has("../../etc/passwd")


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_write_fault_is_one_line_store_error(store, tmp_path, monkeypatch, code):
    src = tmp_path / "src"
    src.write_bytes(b"x" * 10)
    store.cas.put_bytes(b"make the folders")

    def failing_fsync(fd):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "fsync", failing_fsync)
    for call in (lambda: store.cas.put_file(src), lambda: store.cas.put_bytes(b"y")):
        with pytest.raises(StoreError) as info:
            call()
        assert "\n" not in str(info.value) and "cannot write to the cache" in str(info.value)
    assert [p.name for p in (store.root / "objects").iterdir() if p.is_file()] == []


def test_missing_source_is_an_oserror(store, tmp_path):
    with pytest.raises(FileNotFoundError):
        store.cas.put_file(tmp_path / "nope")


def test_a_writer_stores_a_stream_by_its_digest(store):
    chunks = [os.urandom(n) for n in (1, 4096, 3 * hashing.BUF_SIZE + 7, 0, 17)]
    with store.cas.writer() as out:
        for chunk in chunks:
            assert out.write(memoryview(chunk)) == len(chunk)
        digest, size = out.commit()
    data = b"".join(chunks)
    assert (digest, size) == (hashlib.sha256(data).hexdigest(), len(data))
    blob = store.cas.path(digest)
    assert blob.read_bytes() == data and stat.S_IMODE(blob.stat().st_mode) == 0o444
    assert not [p for p in (store.root / "objects").iterdir() if p.is_file()]  # no temp left


def test_a_writer_left_without_commit_stores_nothing(store):
    with pytest.raises(RuntimeError), store.cas.writer() as out:
        out.write(b"half a blob")
        raise RuntimeError("the serializer failed")
    assert list(store.cas) == [] and not [p for p in (store.root / "objects").iterdir() if p.is_file()]


def test_a_writer_into_a_read_only_cache_is_a_store_error(tmp_path):
    from ptebuild.store.cas import CAS

    root = tmp_path / "objects"
    root.mkdir()
    root.chmod(0o555)
    try:
        if os.access(root, os.W_OK):
            pytest.skip("running as a user who may write anywhere")
        with pytest.raises(StoreError, match="cannot write to the cache"):
            CAS(root).writer()
    finally:
        root.chmod(0o755)
