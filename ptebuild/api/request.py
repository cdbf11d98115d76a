"""What a caller asks a build for: :class:`BuildRequest` and :class:`RemoteCache`, and the rules
that turn them (and the environment) into a cache folder, a remote tier and an executor.

These two classes are written out by hand rather than with :mod:`dataclasses`: a repeated build
that finds everything up to date (the no-op stamp, :mod:`ptebuild.api.noop`) builds a request and
exits in about twice Python's start-up, and importing ``dataclasses`` alone (it pulls in
``inspect``) costs half of that again.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from ptebuild.errors import UsageError
from ptebuild.processes import env_flag

TYPE_CHECKING = False  # typing itself is not imported at run time (start-up cost, see above)
if TYPE_CHECKING:
    from typing import Any, ClassVar, Self


class _Value:
    """Frozen keyword-argument values with equality, ``repr``, ``replace`` and JSON."""

    __slots__: tuple[str, ...] = ()
    _defaults: ClassVar[dict[str, Any]] = {}

    _renamed: ClassVar[dict[str, str]] = {}
    """Old field name -> new: still taken, with a DeprecationWarning, for one release."""

    def __init__(self, **fields: Any) -> None:
        for old, new in self._renamed.items():
            if old in fields:
                import warnings

                warnings.warn(f"{type(self).__name__}({old}=...) is now {new}=...; {old} goes in the next release",
                              DeprecationWarning, stacklevel=2)
                fields.setdefault(new, fields.pop(old))
        unknown = sorted(set(fields) - set(self._defaults))
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {unknown[0]!r}")
        for name, default in self._defaults.items():
            object.__setattr__(self, name, self._convert(name, fields.get(name, default)))

    def _convert(self, name: str, value: Any) -> Any:
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen; use .replace({name}=...)")

    def replace(self, **fields: Any) -> Self:
        return type(self)(**{**self.fields(), **fields})

    def fields(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._defaults}

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.fields() == other.fields()

    def __hash__(self) -> int:
        return hash(tuple(self.fields().items()))

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.fields().items() if v != self._defaults[k])
        return f"{type(self).__name__}({shown})"


class RemoteCache(_Value):
    """A shared remote cache: the server's URL, request headers, whether to upload, and the name of
    an environment variable holding the secret that signs action entries (HMAC-SHA-256).

    An empty ``url`` is ``$PTEBUILD_REMOTE_CACHE``; ``upload=None`` is ``$PTEBUILD_REMOTE_UPLOAD``
    (default yes); ``$PTEBUILD_REMOTE_CACHE_HEADER`` adds headers."""

    __slots__ = ("headers", "secret_env", "upload", "url")
    _defaults: ClassVar[dict[str, Any]] = {"url": "", "headers": (), "upload": None, "secret_env": None}
    url: str
    headers: tuple[str, ...]
    """``NAME=VALUE`` strings, as ``--remote-cache-header`` takes them."""
    upload: bool | None
    secret_env: str | None

    def _convert(self, name: str, value: Any) -> Any:
        return tuple(value) if name == "headers" else value

    def to_json(self) -> dict[str, Any]:
        # Header values may be credentials: a stamp or report names the header, never its value.
        return {"url": self.url, "headers": [h.partition("=")[0] for h in self.headers], "upload": self.upload,
                "secret_env": self.secret_env}


class BuildRequest(_Value):
    """How to build a manifest: the options of ``ptebuild build``, as values.

    ``cache=None`` means ``$PTEBUILD_CACHE`` or ``~/.cache/ptebuild``; ``remote=None`` means
    ``$PTEBUILD_REMOTE_CACHE`` (with ``$PTEBUILD_REMOTE_CACHE_HEADER`` and ``$PTEBUILD_REMOTE_UPLOAD``),
    if set; ``executor=None`` means ``$PTEBUILD_EXECUTOR``, else the warm server on Linux when
    there is a local cache, except on CI or with ``no_daemon`` (``$PTEBUILD_NO_DAEMON``).
    """

    __slots__ = (
        "cache",
        "debug",
        "executor",
        "explain",
        "jobs",
        "keep_going",
        "locked",
        "no_cache",
        "no_daemon",
        "only",
        "out",
        "ray_address",
        "remote",
        "reproduce",
        "shard",
        "skip_backends",
        "timings",
    )
    _renamed: ClassVar[dict[str, str]] = {"check": "reproduce"}
    _defaults: ClassVar[dict[str, Any]] = {
        "out": None, "only": (), "skip_backends": (), "keep_going": False, "jobs": None, "explain": False,
        "locked": False, "reproduce": False, "shard": None, "executor": None, "no_daemon": False,
        "ray_address": None, "cache": None, "no_cache": False, "remote": None, "debug": False, "timings": False,
    }
    out: str | None
    """The output folder (default: the manifest's ``defaults.out``)."""
    only: tuple[str, ...]
    """Build only these programs or shim libraries."""
    skip_backends: tuple[str, ...]
    keep_going: bool
    jobs: int | None
    """Lowerings at once (default: the number of cores)."""
    explain: bool
    locked: bool
    """Fail when ``ptebuild.lock`` is missing or stale, or an output's bytes differ from it."""
    reproduce: bool
    """The reproducibility rebuild: lower every program again, ignoring the cache, in a changed
    environment, and fail where the bytes differ (``check=`` before 1.x: "check" is the numeric
    check against eager PyTorch)."""
    shard: tuple[int, int] | None
    executor: str | None
    no_daemon: bool
    ray_address: str | None
    cache: str | None
    no_cache: bool
    remote: RemoteCache | None
    debug: bool
    timings: bool
    """Write the build's timeline into the output's ``.ptebuild/`` folder: ``timings.html`` (one
    self-contained page) and ``timings.trace.json`` (a Chrome trace, for Perfetto)."""

    def _convert(self, name: str, value: Any) -> Any:
        if name in ("only", "skip_backends"):
            return tuple(value or ())
        if name == "shard" and value is not None:
            return (int(value[0]), int(value[1]))
        if name in ("out", "cache") and value is not None:
            return os.fspath(value)
        return value

    @property
    def partial(self) -> bool:
        """True if the build covers part of the manifest (``only``, ``skip_backends``, ``shard``)."""
        return bool(self.only or self.skip_backends or self.shard)

    def to_json(self) -> dict[str, Any]:
        fields = self.fields()
        fields["remote"] = self.remote.to_json() if self.remote is not None else None
        fields["only"], fields["skip_backends"] = list(self.only), list(self.skip_backends)
        fields["shard"] = list(self.shard) if self.shard else None
        return fields

    def validate(self) -> None:
        """Raise UsageError for values no build can use."""
        if self.jobs is not None and self.jobs < 1:
            raise UsageError(f"--jobs {self.jobs}: give at least 1")
        if self.no_cache and self.cache is not None:
            raise UsageError("--cache and --no-cache exclude each other; give one")
        if self.shard is not None and not 1 <= self.shard[0] <= self.shard[1]:
            raise UsageError(f"--shard {self.shard[0]}/{self.shard[1]}: give I/N with 1 <= I <= N, e.g. 1/2")


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)``; UsageError if it is not a shard of N."""
    index, sep, count = text.partition("/")
    if not sep or not index.isdigit() or not count.isdigit() or not 1 <= int(index) <= int(count):
        raise UsageError(f"--shard {text!r}: give I/N with 1 <= I <= N, e.g. 1/2")
    return int(index), int(count)


def cache_root(request: BuildRequest) -> Path | None:
    """The local cache folder of a build, or None with ``no_cache``."""
    if request.no_cache:
        return None
    from ptebuild.cache_dir import default_cache_dir

    return Path(os.path.abspath(Path(request.cache).expanduser() if request.cache else default_cache_dir()))


def remote_cache(request: BuildRequest, environ: Mapping[str, str] | None = None) -> RemoteCache | None:
    """The build's remote cache, its blanks filled from the environment; None if it has none."""
    environ = os.environ if environ is None else environ
    remote = request.remote or RemoteCache()
    url = remote.url or environ.get("PTEBUILD_REMOTE_CACHE", "")
    if not url:
        return None
    upload = remote.upload if remote.upload is not None else environ.get("PTEBUILD_REMOTE_UPLOAD", "yes") != "no"
    return remote.replace(url=url, upload=upload)


def remote_secret(remote: RemoteCache, environ: Mapping[str, str] | None = None) -> bytes | None:
    """The signing secret named by ``remote.secret_env``; UsageError if that variable is unset."""
    if not remote.secret_env:
        return None
    value = (os.environ if environ is None else environ).get(remote.secret_env)
    if not value:
        raise UsageError(f"--remote-secret-env: ${remote.secret_env} is not set; set it to the cache's signing secret")
    return value.encode()


def executor_name(request: BuildRequest, local_cache: bool, environ: Mapping[str, str] | None = None) -> str:
    """Where the build's programs are lowered (see :class:`BuildRequest`); UsageError if unknown."""
    from ptebuild.builder.executors import EXECUTOR_MODULES
    from ptebuild.manifest.typos import did_you_mean

    environ = os.environ if environ is None else environ
    name = request.executor or environ.get("PTEBUILD_EXECUTOR")
    if name is None:
        no_daemon = request.no_daemon or env_flag("PTEBUILD_NO_DAEMON", environ)
        on_ci = environ.get("CI", "").lower() not in ("", "0", "false")
        # The warm server forks a child per task after importing torch: tried on Linux only.
        linux = sys.platform.startswith("linux")
        name = "local" if no_daemon or on_ci or not local_cache or not linux else "daemon"
    if name not in EXECUTOR_MODULES:
        raise UsageError(f"--executor: no executor {name!r}{did_you_mean(name, list(EXECUTOR_MODULES))}; "
                         f"use one of {', '.join(EXECUTOR_MODULES)}")
    if name == "daemon" and not local_cache:
        raise UsageError("--executor daemon: the warm server lives in the local cache folder; drop --no-cache")
    return name
