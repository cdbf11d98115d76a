"""Release packaging: the lockfile, reproducible bundles, their verification and provenance.

Imports neither torch nor executorch. One module per job:

- :mod:`.lock`: ``ptebuild.lock`` (write, read, compare with a build for ``--locked``);
- :mod:`.archive`: reproducible ``.tar.gz``/``.zip`` writing;
- :mod:`.provenance`: the in-toto Statement v1 / SLSA Provenance v1 of a bundle;
- :mod:`.pack`: a verified output folder, or the cache by a lock's digests, into a bundle;
- :mod:`.bundle`: ``ptebuild verify BUNDLE``, without unpacking.

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
    "provenance_statement": "provenance",
    "write_archive": "archive",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
