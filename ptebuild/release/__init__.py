"""Release packaging: the lockfile, reproducible bundles, their verification and provenance.

Imports neither torch nor executorch. One module per job:

- :mod:`.lock`: ``ptebuild.lock`` (write, read, compare with a build for ``--locked``);
- :mod:`.archive`: reproducible ``.tar.gz``/``.zip`` writing;
- :mod:`.provenance`: the in-toto Statement v1 / SLSA Provenance v1 of a bundle;
- :mod:`.pack`: a verified output folder, or the cache by a lock's digests, into a bundle
  (the whole manifest, or one of the bundles it declares);
- :mod:`.bundle`: ``ptebuild verify BUNDLE``, without unpacking;
- :mod:`.diff`: ``ptebuild diff OLD.tar.gz NEW.tar.gz``, what changed program by program.

The names below are imported lazily, so ``import ptebuild.release`` costs nothing. (The
function ``pack`` is reached as ``ptebuild.release.pack.pack``: a package attribute cannot be
both the submodule and the function.)
"""

from __future__ import annotations

from ptebuild.lazy import lazy_exports

_EXPORTS = {
    "Lock": "lock",
    "LockEntry": "lock",
    "Mismatch": "lock",
    "MismatchKind": "lock",
    "check_locked": "lock",
    "compare_lock": "lock",
    "lock_entries_from_record": "lock",
    "lock_entry_from_result": "lock",
    "read_lock": "lock",
    "write_lock": "lock",
    "PackResult": "pack",
    "pack_from_cache": "pack",
    "BundleReport": "bundle",
    "verify_bundle": "bundle",
    "BundleDiff": "diff",
    "diff_bundles": "diff",
    "provenance_statement": "provenance",
    "write_archive": "archive",
}

__all__ = sorted(_EXPORTS)

TYPE_CHECKING = False  # what the type checker sees of the table above; nothing is imported at run time
if TYPE_CHECKING:
    from ptebuild.release.archive import write_archive as write_archive
    from ptebuild.release.bundle import BundleReport as BundleReport
    from ptebuild.release.bundle import verify_bundle as verify_bundle
    from ptebuild.release.diff import BundleDiff as BundleDiff
    from ptebuild.release.diff import diff_bundles as diff_bundles
    from ptebuild.release.lock import Lock as Lock
    from ptebuild.release.lock import LockEntry as LockEntry
    from ptebuild.release.lock import Mismatch as Mismatch
    from ptebuild.release.lock import MismatchKind as MismatchKind
    from ptebuild.release.lock import check_locked as check_locked
    from ptebuild.release.lock import compare_lock as compare_lock
    from ptebuild.release.lock import lock_entries_from_record as lock_entries_from_record
    from ptebuild.release.lock import lock_entry_from_result as lock_entry_from_result
    from ptebuild.release.lock import read_lock as read_lock
    from ptebuild.release.lock import write_lock as write_lock
    from ptebuild.release.pack import PackResult as PackResult
    from ptebuild.release.pack import pack_from_cache as pack_from_cache
    from ptebuild.release.provenance import provenance_statement as provenance_statement


__getattr__ = lazy_exports(__name__, _EXPORTS)
