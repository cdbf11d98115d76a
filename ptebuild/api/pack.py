"""``ptebuild.pack(manifest, dest)``: a verified build, or the cache's copy of a locked one, packed
into a reproducible release bundle (:mod:`ptebuild.release.pack`); ``ptebuild.pack_release``:
what ``ptebuild pack`` does, every bundle the manifest declares. Imports neither torch nor
executorch."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ptebuild.errors import UsageError
from ptebuild.release.pack import PackResult


def pack(manifest: str | os.PathLike[str], dest: str | os.PathLike[str] | None = None, *, bundle: str | None = None,
         out: str | os.PathLike[str] | None = None, lock: str | os.PathLike[str] | None = None,
         from_cache: bool = False, cache: str | os.PathLike[str] | None = None) -> PackResult:
    """Write the bundle ``dest`` (``.tar.gz``, ``.tgz`` or ``.zip``) of ``manifest``'s build: all of
    it, or only the programs of its bundle ``bundle`` (``dest`` then defaults to
    ``<defaults.dist>/<the bundle's output>``).

    ``out``: the build's output folder (default: the manifest's). ``lock``: the lockfile to pack and
    check against (default: ``ptebuild.lock`` beside the manifest, if there is one). ``from_cache``:
    assemble it from the cache (``cache``, default ``$PTEBUILD_CACHE`` or ``~/.cache/ptebuild``) by
    the lock's digests instead of an output folder.

    Raises UsageError for options that exclude each other or an unknown bundle, PackError when the
    build cannot be packed.
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
            return pack_from_cache(lock_path, front, dest, manifest_path=manifest, bundle=bundle)
        finally:
            front.close()
    if cache:
        raise UsageError("pack: --cache only goes with --from-cache")
    return pack_folder(out, manifest, lock_path if (lock or lock_path.is_file()) else None, dest, bundle=bundle)


def pack_release(manifest: str | os.PathLike[str], output: str | os.PathLike[str] | None = None, *,
                 bundles: Sequence[str] = (), out: str | os.PathLike[str] | None = None,
                 lock: str | os.PathLike[str] | None = None, from_cache: bool = False,
                 cache: str | os.PathLike[str] | None = None) -> tuple[PackResult, ...]:
    """What ``ptebuild pack MANIFEST [-o OUTPUT] [--bundle NAME ...]`` writes.

    A manifest that declares bundles: every bundle (or those named in ``bundles``) into the folder
    ``output`` (default: ``defaults.dist``), each under its own archive name; ``output`` may name
    the archive when one bundle is packed. Every archive is written before any is put in place, so
    a failure leaves none. A manifest without bundles: the whole build into the archive ``output``.

    Raises UsageError for a bundle the manifest does not declare or an ``output`` that does not
    fit, PackError when a bundle cannot be packed.
    """
    from ptebuild.manifest import load_manifest
    from ptebuild.release.archive import archive_format

    plan = load_manifest(Path(manifest))

    def one(dest: str | os.PathLike[str] | None, bundle: str | None = None) -> PackResult:
        return pack(manifest, dest, bundle=bundle, out=out, lock=lock, from_cache=from_cache, cache=cache)

    if not plan.bundles:
        if bundles:
            raise UsageError(f"--bundle: {manifest} declares no bundles (add [bundles.NAME] programs = [...])")
        if output is None:
            raise UsageError(f"pack: {manifest} declares no bundles: give the archive to write (-o NAME.tar.gz)")
        return (one(output),)
    names = list(dict.fromkeys(bundles)) or [b.name for b in plan.bundles]
    for name in names:
        if plan.bundle(name) is None:
            from ptebuild.manifest.typos import did_you_mean

            declared = [b.name for b in plan.bundles]
            raise UsageError(f"--bundle: {manifest} has no bundle {name!r}{did_you_mean(name, declared)}; "
                             f"it declares {', '.join(declared)}")
    if output is not None and _names_an_archive(output):
        if len(names) != 1:
            raise UsageError(f"-o {output}: names one archive, but {len(names)} bundles are packed; "
                             "give a folder, or one --bundle")
        archive_format(Path(output))
        return (one(output, names[0]),)
    folder = Path(output) if output is not None else plan.dist_dir()
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"-o {folder}: not a folder (give the folder the bundles go into, or NAME.tar.gz with one --bundle)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{folder}: cannot write there: {exc.strerror}") from None
    with tempfile.TemporaryDirectory(prefix=".ptebuild-bundles-", dir=folder) as staging:
        written = []
        for name in names:
            bundle = plan.bundle(name)
            assert bundle is not None
            written.append(one(Path(staging, bundle.archive), name))
        results = []
        for result in written:
            final = folder / result.archive.path.name
            os.replace(result.archive.path, final)
            results.append(replace(result, archive=replace(result.archive, path=final)))
        shutil.rmtree(staging, ignore_errors=True)
    return tuple(results)


def _names_an_archive(path: str | os.PathLike[str]) -> bool:
    from ptebuild.release.archive import SUFFIXES

    name = Path(path).name.lower()
    return any(name.endswith(suffix) for suffix in SUFFIXES)
