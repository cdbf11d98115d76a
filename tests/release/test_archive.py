"""Reproducible archives: sorted entries, fixed times, owners and modes, gzip header, atomic writes."""

from __future__ import annotations

import gzip
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from ptebuild.errors import UsageError
from ptebuild.release.archive import (
    DEFAULT_TIMESTAMP,
    Entry,
    archive_format,
    archive_stem,
    reproducible_timestamp,
    write_archive,
)


def make_files(folder: Path, mode: int, mtime: int) -> list[Entry]:
    folder.mkdir()
    entries = []
    for name, data in (("b.pte", b"\x01" * 3000), ("a.ptd", b"weights"), ("c.txt", b"")):
        path = folder / name
        path.write_bytes(data)
        os.chmod(path, mode)
        os.utime(path, (mtime, mtime))
        entries.append(Entry(f"bundle/{name}", source=path))
    return [*entries, Entry("bundle/SUMS", data=b"in memory\n")]


@pytest.mark.parametrize("suffix", [".tar.gz", ".zip"])
def test_same_files_with_other_modes_and_times_give_the_same_bytes(tmp_path, suffix):
    one = write_archive(tmp_path / f"one{suffix}", make_files(tmp_path / "x", 0o600, 1_000_000), folders=["bundle"])
    two = write_archive(tmp_path / f"two{suffix}", list(reversed(make_files(tmp_path / "y", 0o755, 2_000_000))), folders=["bundle"])
    assert one.path.read_bytes() == two.path.read_bytes()
    assert one.sha256 == two.sha256 and one.size == one.path.stat().st_size
    assert one.names == ("bundle/", "bundle/SUMS", "bundle/a.ptd", "bundle/b.pte", "bundle/c.txt")


def test_tar_entries_are_sorted_with_fixed_owner_mode_and_time(tmp_path):
    result = write_archive(tmp_path / "b.tar.gz", make_files(tmp_path / "x", 0o600, 5), folders=["bundle"])
    with tarfile.open(result.path) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["bundle", "bundle/SUMS", "bundle/a.ptd", "bundle/b.pte", "bundle/c.txt"]
    for m in members:
        assert (m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "", "", DEFAULT_TIMESTAMP)
        assert m.mode == (0o755 if m.isdir() else 0o644)
        assert m.pax_headers == {}


def test_gzip_header_has_no_name_and_no_time(tmp_path):
    result = write_archive(tmp_path / "b.tgz", make_files(tmp_path / "x", 0o644, 5))
    head = result.path.read_bytes()[:10]
    assert head[:3] == b"\x1f\x8b\x08"
    assert head[3] & 0x08 == 0, "FNAME flag set"
    assert head[4:8] == b"\0\0\0\0", "MTIME set"
    assert gzip.decompress(result.path.read_bytes())  # a valid stream


def test_zip_entries_have_unix_modes_and_the_fixed_time(tmp_path):
    result = write_archive(tmp_path / "b.zip", make_files(tmp_path / "x", 0o600, 5), folders=["bundle"])
    with zipfile.ZipFile(result.path) as zf:
        infos = zf.infolist()
        assert zf.read("bundle/b.pte") == b"\x01" * 3000
    assert [i.filename for i in infos] == ["bundle/", "bundle/SUMS", "bundle/a.ptd", "bundle/b.pte", "bundle/c.txt"]
    for info in infos:
        assert info.date_time == (1980, 1, 1, 0, 0, 0)
        assert info.create_system == 3
        assert info.external_attr >> 16 == (0o040755 if info.is_dir() else 0o100644)


def test_source_date_epoch_sets_the_time(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert reproducible_timestamp() == 1700000000
    result = write_archive(tmp_path / "b.tar.gz", [Entry("bundle/x", data=b"x")])
    with tarfile.open(result.path) as tar:
        assert tar.getmember("bundle/x").mtime == 1700000000
    assert reproducible_timestamp({"SOURCE_DATE_EPOCH": "10"}) == DEFAULT_TIMESTAMP  # zip holds no earlier time
    with pytest.raises(UsageError, match="SOURCE_DATE_EPOCH='soon': not an integer"):
        reproducible_timestamp({"SOURCE_DATE_EPOCH": "soon"})


def test_a_failed_write_leaves_neither_archive_nor_temporary_file(tmp_path):
    dest = tmp_path / "out" / "b.tar.gz"
    dest.parent.mkdir()
    dest.write_bytes(b"the last good archive")
    with pytest.raises(FileNotFoundError):
        write_archive(dest, [Entry("bundle/a", data=b"a"), Entry("bundle/gone", source=tmp_path / "gone")])
    assert os.listdir(dest.parent) == ["b.tar.gz"]
    assert dest.read_bytes() == b"the last good archive"


def test_two_entries_with_one_name_are_refused(tmp_path):
    with pytest.raises(UsageError, match="two files would be packed as 'bundle/a'"):
        write_archive(tmp_path / "b.zip", [Entry("bundle/a", data=b"1"), Entry("bundle/a", data=b"2")])


@pytest.mark.parametrize(
    "name, fmt, stem",
    [("r.tar.gz", "tar.gz", "r"), ("dist/robot-1.2.TGZ", "tar.gz", "robot-1.2"), ("r.zip", "zip", "r")],
)
def test_archive_format_and_stem(name, fmt, stem):
    assert archive_format(name) == fmt
    assert archive_stem(name) == stem


@pytest.mark.parametrize("name", ["r.tar", "r.tar.xz", ".zip", "r"])
def test_other_endings_are_usage_errors(name):
    with pytest.raises(UsageError, match="unknown archive type; name it NAME.tar.gz, NAME.tgz or NAME.zip"):
        archive_format(name)


def test_missing_folders_are_made_and_unwritable_places_are_usage_errors(tmp_path):
    result = write_archive(tmp_path / "dist" / "v1" / "b.zip", [Entry("b/x", data=b"x")])
    assert result.path.is_file()
    (tmp_path / "dist.zip").mkdir()
    with pytest.raises(UsageError, match="dist.zip: is a folder"):
        write_archive(tmp_path / "dist.zip", [Entry("b/x", data=b"x")])
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match=r"file/b.zip: cannot write there: .*/file is not a folder"):
        write_archive(tmp_path / "file" / "b.zip", [Entry("b/x", data=b"x")])
