"""Real filesystem faults: a full disk and a read-only cache (tmpfs mounts; needs root)."""

import os
import subprocess
import uuid

import pytest

from ptebuild.errors import StoreError
from ptebuild.store import Store


@pytest.fixture
def tmpfs(tmp_path):
    mnt = tmp_path / f"mnt-{uuid.uuid4().hex[:8]}"
    mnt.mkdir()
    ok = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True
    )
    if ok.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_full_disk_is_a_store_error_and_leaves_nothing(tmpfs, tmp_path):
    store = Store(tmpfs / "cache")
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(6 << 20))
    with pytest.raises(StoreError, match="no space left") as info:
        store.cas.put_file(big)
    assert "\n" not in str(info.value)
    with pytest.raises(StoreError, match="no space left"):
        store.cas.put_bytes(os.urandom(6 << 20))
    assert list(store.cas) == []
    assert not list((tmpfs / "cache").rglob("*.tmp"))


def test_read_only_cache_reads_and_refuses_writes(tmpfs, tmp_path):
    store = Store(tmpfs / "cache")
    digest = store.cas.put_bytes(b"payload")
    store.actions.put("ab" * 16, "p", {"outputs": [{"digest": digest}]})
    store.record_hit()
    store.close()
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)

    ro = Store(tmpfs / "cache")
    src = tmp_path / "src"
    src.write_bytes(b"source")
    assert ro.actions.get("ab" * 16) == {"outputs": [{"digest": digest}]}
    assert ro.actions.last_for("p") is not None
    assert ro.cas.restore(digest, tmp_path / "out.pte") is True
    assert ro.digest_file(src)[1] == 6
    ro.record_hit()
    ro.record_miss()
    assert ro.stats()["entries"] == 1
    for call in (
        lambda: ro.cas.put_file(src),
        lambda: ro.cas.put_bytes(b"new"),
        lambda: ro.actions.put("cd" * 16, "p", {}),
    ):
        with pytest.raises(StoreError, match="read-only") as info:
            call()
        assert "\n" not in str(info.value)
