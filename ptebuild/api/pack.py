"""``ptebuild.pack(manifest, dest)``: a verified build, or the cache's copy of a locked one, packed
into a reproducible release bundle (:mod:`ptebuild.release.pack`). Imports neither torch nor
executorch."""

from __future__ import annotations

import os
from pathlib import Path

from ptebuild.errors import UsageError
from ptebuild.release.pack import PackResult


def pack(manifest: str | os.PathLike[str], dest: str | os.PathLike[str], *, out: str | os.PathLike[str] | None = None,
         lock: str | os.PathLike[str] | None = None, from_cache: bool = False,
         cache: str | os.PathLike[str] | None = None) -> PackResult:
    """Write the bundle ``dest`` (``.tar.gz``, ``.tgz`` or ``.zip``) of ``manifest``'s build.

    ``out``: the build's output folder (default: the manifest's). ``lock``: the lockfile to pack and
    check against (default: ``ptebuild.lock`` beside the manifest, if there is one). ``from_cache``:
    assemble it from the cache (``cache``, default ``$PTEBUILD_CACHE`` or ``~/.cache/ptebuild``) by
    the lock's digests instead of an output folder.

    Raises UsageError for options that exclude each other, PackError when the build cannot be packed.
    """
    from ptebuild.release.lock import LOCK_NAME
    from ptebuild.release.pack import pack as pack_folder
    from ptebuild.release.pack import pack_from_cache

    manifest = Path(manifest)
    lock_path = Path(lock) if lock else manifest.parent / LOCK_NAME
    if from_cache:
        if out:
            raise UsageError("pack: --out and --from-cache exclude each other (--from-cache reads no output folder)")
        from ptebuild.cache_dir import default_cache_dir
        from ptebuild.store.frontend import Cache

        front = Cache.for_folder(Path(cache) if cache else default_cache_dir())
        try:
            return pack_from_cache(lock_path, front, dest, manifest_path=manifest)
        finally:
            front.close()
    if cache:
        raise UsageError("pack: --cache only goes with --from-cache")
    return pack_folder(out, manifest, lock_path if (lock or lock_path.is_file()) else None, dest)
