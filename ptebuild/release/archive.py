"""Reproducible ``.tar.gz`` and ``.zip`` archives: the same files give the same bytes anywhere.

What varies between machines, users and runs is fixed or dropped (the habits of hatchling's
``builders/utils.py`` and rules_pkg's archives):

- entries are written sorted by name, with a ``/``-separated relative name;
- every mtime is :func:`reproducible_timestamp` (``SOURCE_DATE_EPOCH`` when set, else
  1980-01-01T00:00:00Z, the earliest time a zip entry can hold);
- owners are uid/gid 0 with empty user and group names; modes are 0644 for files and 0755
  for folders, whatever the umask was;
- tar: POSIX.1-2001 (PAX) format, which Python writes as plain ustar headers when every field
  fits; gzip: no file name and mtime 0 in the header, compression level 9;
- zip: deflated, created-by Unix, no extra fields, DOS time from the fixed timestamp.

File contents are streamed from disk (never read whole into memory). The archive is written
to a temporary file in the destination's folder, fsynced and renamed into place, so a reader
never sees half an archive. Byte-identical output also needs the same zlib (the deflate
stream is zlib's): the toolchain pins Python, and so its zlib.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import shutil
import tarfile
import time
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, Literal, get_args

from ptebuild.atomic import atomic_output
from ptebuild.errors import UsageError
from ptebuild.hashing import hash_fd

ArchiveFormat = Literal["tar.gz", "zip"]
FORMATS: tuple[str, ...] = get_args(ArchiveFormat)
#: File name endings of each format (``.tgz`` is read as ``.tar.gz``).
SUFFIXES: Mapping[str, ArchiveFormat] = {".tar.gz": "tar.gz", ".tgz": "tar.gz", ".zip": "zip"}

#: 1980-01-01T00:00:00Z: zip cannot hold an earlier time.
DEFAULT_TIMESTAMP = 315532800
#: The latest time a zip entry can hold (2107-12-31).
_ZIP_MAX_TIMESTAMP = 4354819199
FILE_MODE = 0o644
DIR_MODE = 0o755
GZIP_LEVEL = 9
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Entry:
    """One file of an archive: ``name`` (``/``-separated) and its bytes, from a path or in memory."""

    name: str
    source: Path | None = None
    data: bytes | None = None

    def __post_init__(self) -> None:
        if (self.source is None) == (self.data is None):
            raise ValueError(f"{self.name}: give exactly one of source and data")

    def size(self) -> int:
        return len(self.data) if self.data is not None else os.stat(self._source()).st_size

    def open(self) -> IO[bytes]:
        return io.BytesIO(self.data) if self.data is not None else open(self._source(), "rb")

    def _source(self) -> Path:
        if self.source is None:  # never: __post_init__ took exactly one of source and data
            raise ValueError(f"{self.name}: has no source file")
        return self.source


@dataclass(frozen=True)
class ArchiveResult:
    path: Path
    format: ArchiveFormat
    sha256: str
    size: int
    names: tuple[str, ...]
    """Every entry written, in order (folders end with ``/``)."""


def archive_format(path: str | os.PathLike[str]) -> ArchiveFormat:
    """The format a file name asks for. Raises UsageError for any other ending."""
    name = Path(path).name.lower()
    for suffix, fmt in SUFFIXES.items():
        if name.endswith(suffix) and len(name) > len(suffix):
            return fmt
    raise UsageError(
        f"{path}: unknown archive type; name it NAME.tar.gz, NAME.tgz or NAME.zip"
    )


def archive_stem(path: str | Path) -> str:
    """``dist/robot-1.2.tar.gz`` -> ``robot-1.2``: the archive's name without its ending."""
    name = Path(path).name
    for suffix in SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def reproducible_timestamp(environ: Mapping[str, str] | None = None) -> int:
    """``SOURCE_DATE_EPOCH`` when set (clamped to what zip can hold), else 1980-01-01.

    Raises UsageError if ``SOURCE_DATE_EPOCH`` is not an integer.
    """
    env = os.environ if environ is None else environ
    value = env.get("SOURCE_DATE_EPOCH")
    if not value:
        return DEFAULT_TIMESTAMP
    try:
        stamp = int(value)
    except ValueError:
        raise UsageError(
            f"SOURCE_DATE_EPOCH={value!r}: not an integer; set it to seconds since 1970-01-01 UTC, or unset it"
        ) from None
    return min(max(stamp, DEFAULT_TIMESTAMP), _ZIP_MAX_TIMESTAMP)


def write_archive(
    dest: str | Path,
    entries: Iterable[Entry],
    folders: Iterable[str] = (),
    timestamp: int | None = None,
) -> ArchiveResult:
    """Write ``entries`` (and the empty ``folders``, e.g. the bundle's top folder) to ``dest``.

    The format comes from ``dest``'s name (:func:`archive_format`); missing parent folders
    are created. Raises UsageError for a bad name, two entries with one name or a folder that
    cannot be written; OSError if an entry's source cannot be read.
    """
    dest = Path(dest)
    fmt = archive_format(dest)
    stamp = reproducible_timestamp() if timestamp is None else timestamp
    files = sorted(entries, key=lambda e: e.name)
    names = [e.name for e in files]
    if len(set(names)) != len(names):
        duplicate = next(n for n in names if names.count(n) > 1)
        raise UsageError(f"{dest}: two files would be packed as {duplicate!r}; rename one of them")
    dirs = sorted({f.rstrip("/") + "/" for f in folders})
    if dest.is_dir():
        raise UsageError(f"{dest}: is a folder; give the archive's file name, e.g. {dest}/bundle.tar.gz")
    if dest.parent.exists() and not dest.parent.is_dir():
        raise UsageError(f"{dest}: cannot write there: {dest.parent} is not a folder; give a path in a folder")
    with contextlib.ExitStack() as stack:
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            out = stack.enter_context(atomic_output(dest, mode=FILE_MODE, readable=True))
        except OSError as exc:
            raise UsageError(f"{dest}: cannot write there: {exc.strerror}; give a path in a folder you can write to") from None
        if fmt == "zip":
            _write_zip(out, dirs, files, stamp)
        else:
            _write_tar_gz(out, dirs, files, stamp)
        out.flush()
        out.seek(0)
        digest, size = hash_fd(out.fileno())
    return ArchiveResult(dest, fmt, digest, size, tuple(dirs + names))


def _tar_info(name: str, stamp: int, mode: int, kind: bytes, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = stamp
    info.mode = mode
    info.type = kind
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _write_tar_gz(out: BinaryIO, dirs: list[str], files: list[Entry], stamp: int) -> None:
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=GZIP_LEVEL) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
            for name in dirs:
                tar.addfile(_tar_info(name.rstrip("/"), stamp, DIR_MODE, tarfile.DIRTYPE))
            for entry in files:
                with entry.open() as f:
                    size = os.fstat(f.fileno()).st_size if entry.source is not None else entry.size()
                    tar.addfile(_tar_info(entry.name, stamp, FILE_MODE, tarfile.REGTYPE, size), f)


def _zip_info(name: str, stamp: int, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=time.gmtime(stamp)[:6])
    info.create_system = 3  # Unix, so that external_attr carries the mode
    info.external_attr = mode << 16
    info.compress_type = zipfile.ZIP_DEFLATED if not name.endswith("/") else zipfile.ZIP_STORED
    # ZipFile.open(info, "w") takes the level from the info, not the ZipFile (3.11 names it so).
    info._compresslevel = GZIP_LEVEL  # type: ignore[attr-defined]
    return info


def _write_zip(out: BinaryIO, dirs: list[str], files: list[Entry], stamp: int) -> None:
    with zipfile.ZipFile(out, mode="w", compression=zipfile.ZIP_DEFLATED, compresslevel=GZIP_LEVEL) as zf:
        for name in dirs:
            info = _zip_info(name, stamp, 0o040000 | DIR_MODE)
            info.external_attr |= 0x10  # MS-DOS directory flag
            zf.writestr(info, b"")
        for entry in files:
            info = _zip_info(entry.name, stamp, 0o100000 | FILE_MODE)
            with entry.open() as src:
                info.file_size = os.fstat(src.fileno()).st_size if entry.source is not None else entry.size()
                with zf.open(info, mode="w", force_zip64=info.file_size >= zipfile.ZIP64_LIMIT) as dst:
                    shutil.copyfileobj(src, dst, _CHUNK)
