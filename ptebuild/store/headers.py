"""The remote cache's address and credentials: its URL, its extra headers, its auth object.

URL
===

The base URL is ``http://`` or ``https://``, host, optional port and path prefix. A
``user:password@`` in it is sent as HTTP Basic auth; a query string or fragment is refused (put
a token in a header). :func:`sanitize_url` gives the URL without userinfo, query, fragment and
trailing ``/``: the only form of it that is printed.

Headers
=======

Extra request headers come from ``--remote-cache-header NAME=VALUE`` (repeatable) and from
``$PTEBUILD_REMOTE_CACHE_HEADER`` (``NAME=VALUE`` lines); a command-line header of the same name
(case-insensitive) wins. ``NAME`` is an HTTP header name (an RFC 9110 token); a value holding a
line break or NUL is refused.

Credentials
===========

Header values and URL userinfo live only in a ``requests`` auth object (:func:`make_auth`) whose
repr hides them. No message, repr, exception or statistic of the remote tier contains them:
errors here name the header, never its value, and the tier's messages are built from the
server's sanitised name, the method and the path, never from a library's exception text.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import SplitResult, unquote, urlsplit

from ptebuild.errors import UsageError

if TYPE_CHECKING:
    import requests
    import requests.auth

HEADER_ENV = "PTEBUILD_REMOTE_CACHE_HEADER"
"""Environment variable with extra headers: ``NAME=VALUE``, several separated by newlines."""

_TOKEN_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP header name (RFC 9110 token)


def parse_header(text: str, origin: str = "--remote-cache-header") -> tuple[str, str]:
    """``"NAME=VALUE"`` -> ``(NAME, VALUE)``; raise UsageError (never quoting the value)."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not _TOKEN_RE.fullmatch(name):
        raise UsageError(f"{origin}: not a header; give NAME=VALUE with NAME an HTTP header name")
    if any(c in value for c in "\r\n\0"):
        raise UsageError(f"{origin}: the value of header {name} contains a line break or NUL; give it on one line")
    return name, value.strip()


def headers_from(values: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Headers from ``--remote-cache-header`` values, then ``$PTEBUILD_REMOTE_CACHE_HEADER``.

    The environment variable holds ``NAME=VALUE`` lines; a command-line header of the same name
    wins. Raises UsageError (without the value) if one is malformed.
    """
    env = os.environ if environ is None else environ
    headers: dict[str, str] = {}
    for line in (env.get(HEADER_ENV) or "").splitlines():
        if line.strip():
            name, value = parse_header(line, HEADER_ENV)
            headers[name] = value
    for text in values:
        name, value = parse_header(text)
        headers = {k: v for k, v in headers.items() if k.lower() != name.lower()}
        headers[name] = value
    return headers


def sanitize_url(url: str) -> str:
    """The URL without userinfo, query and fragment, and without a trailing ``/``: safe to print."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{netloc}{parts.path}".rstrip("/")


def split_url(url: str) -> tuple[str, tuple[str, str] | None]:
    """``(base URL without userinfo, (user, password) or None)``; raise UsageError if unusable."""
    _, safe, userinfo = read_url(url, ("http", "https"), "http[s]://host[:port][/prefix]", "an http:// or https://")
    return safe, userinfo


def read_url(url: str, schemes: tuple[str, ...], form: str, kind: str) -> tuple[SplitResult, str, tuple[str, str] | None]:
    """``(its parts, the URL as printed, (user, password) or None)`` of a remote cache's URL;
    UsageError unless it parses (``form``: the shape expected), its scheme is one of ``schemes``
    (``kind`` names them) with a host, and it has no query string nor fragment."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise UsageError(f"--remote-cache: not a valid URL; give {form}") from None
    safe = sanitize_url(url)
    if parts.scheme not in schemes or not parts.hostname:
        raise UsageError(f"--remote-cache: {safe!r} is not {kind} URL with a host; give {form}")
    if parts.query or parts.fragment:
        raise UsageError(
            f"--remote-cache {safe}: a query string or fragment is not supported; "
            "pass a token with --remote-cache-header NAME=VALUE"
        )
    userinfo = None
    if "@" in parts.netloc:
        user, _, password = parts.netloc.rpartition("@")[0].partition(":")
        userinfo = (unquote(user), unquote(password))
    return parts, safe, userinfo


def make_auth(headers: Mapping[str, str], userinfo: tuple[str, str] | None) -> requests.auth.AuthBase:
    """A ``requests`` auth object adding ``headers`` (and Basic auth for ``userinfo``) to each
    request; its repr and str name the headers, never a value."""
    import requests.auth

    class _Credentials(requests.auth.AuthBase):
        """Adds the secret headers (and Basic auth) to each request; its repr names no value."""

        __slots__ = ("_headers",)

        def __init__(self) -> None:
            h = dict(headers)
            if userinfo is not None:
                token = base64.b64encode(f"{userinfo[0]}:{userinfo[1]}".encode()).decode()
                h.setdefault("Authorization", f"Basic {token}")
            self._headers = h

        def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
            r.headers.update(self._headers)
            return r

        def __repr__(self) -> str:
            return f"<credentials: {', '.join(sorted(self._headers)) or 'none'}>"

        __str__ = __repr__

    return _Credentials()
