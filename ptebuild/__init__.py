"""ptebuild: declarative, content-addressed builds of reproducible ExecuTorch artifacts.

The public API (importing ``ptebuild`` imports neither torch, executorch nor pydantic; each name
loads its module when first used)::

    import ptebuild

    report = ptebuild.build("manifests/robot.toml", ptebuild.BuildRequest(jobs=2, only=["policy_xnnpack"]))
    for target in report.targets:
        print(target.name, target.status, [o.name for o in target.outputs])
    ptebuild.lock("manifests/robot.toml")
    ptebuild.pack("manifests/robot.toml", "robot-1.0.tar.gz")
    assert ptebuild.verify("out/robot", verify_bytes=True).ok

- :func:`build` (:class:`BuildRequest` -> :class:`BuildReport`), :func:`lock`, :func:`pack`,
  :func:`verify`, :func:`inspect`, :func:`diff`, :func:`run`: :mod:`ptebuild.api`;
- :func:`load_manifest` reads and validates a manifest into a :class:`ptebuild.plan.BuildPlan`;
- :func:`load` loads a ``.pte`` with its ``.ptd`` files, verified;
- errors: :mod:`ptebuild.errors` (``UsageError``, ``ManifestError``, ``BuildError``...).
"""

from __future__ import annotations

from ptebuild.lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "build": "api.build",
    "BuildReport": "api.build",
    "BuildRequest": "api.request",
    "RemoteCache": "api.request",
    "lock": "api.lock",
    "LockReport": "api.lock",
    "pack": "api.pack",
    "verify": "api.verify",
    "inspect": "api.inspect",
    "diff": "api.inspect",
    "run": "api.run",
    "load_manifest": "manifest",
    "load": "runtime",
}

__all__ = ["__version__", *_EXPORTS]

__getattr__ = lazy_exports(__name__, _EXPORTS)
