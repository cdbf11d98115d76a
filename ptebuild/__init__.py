"""ptebuild: declarative, content-addressed builds of reproducible ExecuTorch artifacts.

The public API (importing ``ptebuild`` imports neither torch, executorch nor pydantic; each name
loads its module when first used)::

    import ptebuild

    report = ptebuild.build("manifests/robot.toml", ptebuild.BuildRequest(jobs=2, only=["policy_xnnpack"]))
    for target in report.targets:
        print(target.name, target.status, [o.name for o in target.outputs])
    ptebuild.lock("manifests/robot.toml")
    ptebuild.pack("manifests/robot.toml", "robot-1.0.tar.gz")   # its bundle, as `ptebuild pack ... -o`
    ptebuild.pack_release("manifests/robot_mobile.toml")   # every [bundles.NAME] into defaults.dist
    assert ptebuild.verify("out/robot", verify_bytes=True).ok

- :func:`build` (:class:`BuildRequest` -> :class:`BuildReport`), :func:`lock`, :func:`pack`, :func:`pack_release`,
  :func:`verify`, :func:`inspect`, :func:`diff`, :func:`run`: :mod:`ptebuild.api`;
- :func:`load_manifest` reads and validates a manifest into a :class:`ptebuild.plan.BuildPlan`;
- :func:`load` loads a ``.pte`` with its ``.ptd`` files, verified;
- errors: :mod:`ptebuild.errors` (``UsageError``, ``ManifestError``, ``BuildError``...).
"""

from __future__ import annotations

from ptebuild._version import __version__
from ptebuild.lazy import lazy_exports

_EXPORTS = {
    "build": "api.build",
    "BuildReport": "api.build",
    "BuildRequest": "api.request",
    "RemoteCache": "api.request",
    "lock": "api.lock",
    "LockReport": "api.lock",
    "pack": "api.pack",
    "pack_release": "api.pack",
    "verify": "api.verify",
    "inspect": "api.inspect",
    "diff": "api.inspect",
    "run": "api.run",
    "doctor": "api.doctor",
    "DoctorReport": "api.doctor",
    "load_manifest": "manifest",
    "load": "runtime",
}

__all__ = ["__version__", *_EXPORTS]

TYPE_CHECKING = False  # what the type checker sees of the table above; nothing is imported at run time
if TYPE_CHECKING:
    from ptebuild.api.build import BuildReport as BuildReport
    from ptebuild.api.build import build as build
    from ptebuild.api.inspect import diff as diff
    from ptebuild.api.inspect import inspect as inspect
    from ptebuild.api.lock import LockReport as LockReport
    from ptebuild.api.lock import lock as lock
    from ptebuild.api.pack import pack as pack
    from ptebuild.api.pack import pack_release as pack_release
    from ptebuild.api.request import BuildRequest as BuildRequest
    from ptebuild.api.request import RemoteCache as RemoteCache
    from ptebuild.api.run import run as run
    from ptebuild.api.verify import verify as verify
    from ptebuild.manifest import load_manifest as load_manifest
    from ptebuild.runtime import load as load

__getattr__ = lazy_exports(__name__, _EXPORTS)
