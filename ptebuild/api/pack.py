"""``ptebuild.pack(manifest, dest)``: a verified build, or the cache's copy of a locked one, packed
into one reproducible release archive (:mod:`ptebuild.release.pack`); ``ptebuild.pack_release``:
every bundle the manifest declares, each into its archive. Imports neither torch nor executorch.

What a release holds is the manifest's to say, whichever client asks: a manifest that declares
bundles (``[bundles.NAME]``) is released as those bundles, and only a manifest without bundles
packs its whole build into one archive. So ``ptebuild.pack("robot.toml", "robot-1.0.tar.gz")``
and ``ptebuild pack robot.toml -o robot-1.0.tar.gz`` write the same archive (the robot's one
bundle, ``robot-xnnpack``); a manifest with several bundles names the one to pack (``bundle=``,
``--bundle``), or packs them all (``pack_release``, ``ptebuild pack MANIFEST``).
"""

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
    """Write one archive ``dest`` (``.tar.gz``, ``.tgz`` or ``.zip``) of ``manifest``'s build: its
    bundle ``bundle``, or, left out, the one bundle it declares, or the whole build when it
    declares none (see the module docstring). ``dest`` defaults, for a bundle, to
    ``<defaults.dist>/<the bundle's output>``.

    ``out``: the build's output folder (default: the manifest's). ``lock``: the lockfile to pack and
    check against (default: ``ptebuild.lock`` beside the manifest, if there is one). ``from_cache``:
    assemble it from the cache (``cache``, default ``$PTEBUILD_CACHE`` or ``~/.cache/ptebuild``) by
    the lock's digests instead of an output folder.

    Raises UsageError for options that exclude each other, an unknown bundle, or no bundle named
    where the manifest declares several; PackError when the build cannot be packed.
    """
    from ptebuild.release.lock import LOCK_NAME
    from ptebuild.release.pack import pack as pack_folder
    from ptebuild.release.pack import pack_from_cache

    manifest = Path(manifest)
    if bundle is None:
        bundle = _the_bundle(manifest, dest)
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
                             f"name one of {', '.join(declared)}")
    if output is not None and _names_an_archive(output):
        if len(names) != 1:
            raise _one_archive_many_bundles(output, len(names))
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


def _the_bundle(manifest: Path, dest: str | os.PathLike[str] | None) -> str | None:
    """The bundle one archive of ``manifest`` holds when none is named: its only one, or None
    (the whole build) when it declares none; UsageError when it declares several."""
    from ptebuild.manifest import load_manifest

    declared = [b.name for b in load_manifest(manifest).bundles]
    if len(declared) > 1:
        raise _one_archive_many_bundles(dest, len(declared))
    return declared[0] if declared else None


def _one_archive_many_bundles(dest: str | os.PathLike[str] | None, count: int) -> UsageError:
    return UsageError(f"-o {dest}: names one archive, but {count} bundles are packed; give a folder, or one --bundle")


def _names_an_archive(path: str | os.PathLike[str]) -> bool:
    from ptebuild.release.archive import SUFFIXES

    name = Path(path).name.lower()
    return any(name.endswith(suffix) for suffix in SUFFIXES)
