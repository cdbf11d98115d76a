"""Skip manifest validation when the manifest's bytes have not changed.

Validating a manifest needs pydantic, whose import alone costs about as much as the whole
budget of a no-op build. The resolved :class:`BuildPlan` is therefore kept in the local cache (a
memo of the cache front end) under a key over the manifest's bytes and the code that resolved it:
ptebuild's version and the digest of all its source files (:mod:`ptebuild.own_code`, through the
stat cache), and the installed plug-in backends (their options models resolve their programs'
options). An unchanged manifest read by the same code is read back as plain JSON; a plan made by
other code (an edited or upgraded checkout keeps its version string) is never reused: its fields
and defaults may not be what this code resolves. Anything else (a missing store, a damaged entry)
validates as usual.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ptebuild.backends import bind_plan
from ptebuild.errors import ManifestError
from ptebuild.models import options_model_of
from ptebuild.plan import BuildPlan

if TYPE_CHECKING:
    from ptebuild.store.frontend import Cache

SCHEMA = b"ptebuild-plan-cache 2\0"


def _key(manifest_bytes: bytes, cache: Cache) -> str:
    import xxhash

    from ptebuild import backend_registry, own_code
    from ptebuild._version import __version__

    digest = xxhash.xxh3_128(SCHEMA)
    digest.update(__version__.encode() + b"\0")
    digest.update(own_code.everything_digest(own_code.ROOT, cache.digest_file).encode() + b"\0")
    digest.update(backend_registry.fingerprint(cache.digest_file).encode() + b"\0")
    # The plan records the manifest's folder; the key must not, so a moved checkout still hits.
    digest.update(manifest_bytes)
    return digest.hexdigest()


def load_plan(manifest: str, cache: Cache | None) -> BuildPlan:
    """The plan of ``manifest``, from the cache (a :class:`~ptebuild.store.frontend.Cache`)
    when its bytes are unchanged."""
    def load_manifest(manifest: str) -> BuildPlan:
        from ptebuild.manifest.load import load_manifest

        return load_manifest(manifest)

    path = Path(manifest)
    manifest_dir = path.resolve().parent
    if cache is None:
        return load_manifest(manifest)
    try:
        data = path.read_bytes()
    except OSError:
        return load_manifest(manifest)  # reports the problem in the usual words
    key = _key(data, cache)
    record = cache.memo_get(key)
    if record is not None and isinstance(record.get("plan"), str):
        try:
            plan = BuildPlan.from_json(record["plan"], manifest=manifest, manifest_dir=str(manifest_dir))
            return bind_plan(plan, options_model_of)  # a model kind's programs validate by its options model
        except (KeyError, TypeError, ValueError):
            pass
    plan = load_manifest(manifest)
    cache.memo_put(key, {"plan": plan.to_json()})
    return plan


__all__ = ["ManifestError", "load_plan"]
