"""A gRPC remote cache's address: its URL, and the request metadata its headers and userinfo become.

``grpc://HOST:PORT[/INSTANCE]`` (plain text) or ``grpcs://HOST[:PORT][/INSTANCE]`` (TLS, port 443
by default, the roots grpc bundles or ``$GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``). ``INSTANCE`` is the
REAPI instance name (Bazel's ``--remote_instance_name``), empty by default. ``user:password@`` is
sent as Basic auth; headers (``--remote-cache-header``) are sent as metadata, their names
lowercased (a gRPC metadata key is letters, digits, ``-``, ``_`` and ``.``). Only the URL without
its userinfo is ever printed (:func:`ptebuild.store.headers.sanitize_url`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import unquote

from ptebuild.errors import UsageError
from ptebuild.store.headers import read_url

_METADATA_KEY_RE = re.compile(r"[0-9a-z_.-]+")


def split_url(url: str) -> tuple[str, str, str, bool, tuple[str, str] | None]:
    """``(printable URL, host:port target, instance name, TLS?, (user, password) or None)``;
    raise UsageError if the URL is unusable."""
    parts, safe, userinfo = read_url(url, ("grpc", "grpcs"), "grpc[s]://host[:port][/instance]", "a grpc:// or grpcs://")
    secure = parts.scheme == "grpcs"
    if parts.port is None and not secure:
        raise UsageError(f"--remote-cache {safe}: a grpc:// URL needs a port; give grpc://host:port")
    hostname = parts.hostname or ""  # read_url checked there is one
    host = hostname if ":" not in hostname else f"[{hostname}]"
    return safe, f"{host}:{parts.port or 443}", unquote(parts.path.strip("/")), secure, userinfo


def metadata_of(headers: Mapping[str, str], userinfo: tuple[str, str] | None) -> tuple[tuple[str, str], ...]:
    """The request metadata for ``headers`` (and Basic auth for ``userinfo``); UsageError, naming
    the header and never its value, for a name gRPC cannot carry."""
    import base64

    pairs: dict[str, str] = {}
    for name, value in headers.items():
        key = name.lower()
        if not _METADATA_KEY_RE.fullmatch(key) or key.endswith("-bin") or key.startswith("grpc-"):
            raise UsageError(f"remote cache header {name}: not a gRPC metadata key; use letters, digits, '-', '_' and '.', "
                             "not grpc-* nor *-bin")
        pairs[key] = value
    if userinfo is not None and "authorization" not in pairs:
        pairs["authorization"] = "Basic " + base64.b64encode(f"{userinfo[0]}:{userinfo[1]}".encode()).decode()
    return tuple(sorted(pairs.items()))
