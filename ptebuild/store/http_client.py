"""The remote tier's HTTP client: one ``requests`` session, and how its faults are described.

Transport
=========

Requests are never redirected (a ``3xx`` is an error), so headers never travel to another host.
Bodies are sent in 1 MiB writes (:data:`CHUNK`); ``Accept-Encoding: identity``. Connections are
pooled (``jobs`` of them) and reused. Proxies and CA bundles come from the environment as
``requests`` reads them (``HTTPS_PROXY``, ``NO_PROXY``, ``REQUESTS_CA_BUNDLE``); ``~/.netrc``
is not used.

Faults
======

Every request has a timeout (connect and each read). A connection error, timeout, ``5xx``,
``429`` or truncated body is a transient fault, retried; ``404`` is a miss; ``401``/``403``/``407``
are refused credentials. Retries, warnings and the failure budget are :mod:`.faults`'
(:class:`~ptebuild.store.faults.Budget`, which :class:`Client` is), the same for the gRPC tier.

A fault is described by a fixed phrase (:func:`describe`, :func:`status_fault`), never by a
library's exception text, which may carry a URL or a header.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ptebuild.store.faults import Fault
from ptebuild.store.remote import Transport

__all__ = ["CHUNK", "Client", "Fault", "describe", "status_fault"]

if TYPE_CHECKING:
    import requests
    import requests.auth

CHUNK = 1 << 20
"""Bytes per read and write of a streamed body."""

_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_AUTH_STATUS = frozenset({401, 403, 407})


def describe(exc: BaseException, timeout: float) -> str:
    """A fixed phrase for a transport exception (never its text, which may carry a URL)."""
    import requests

    from ptebuild.causes import chain

    text = "".join(f" {type(node).__name__} {node}" for node in chain(exc))  # the reason sits a few causes deep
    low = text.lower()
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return f"no connection within {timeout:g} s"
    if isinstance(exc, requests.exceptions.ReadTimeout) or "read timed out" in low:
        return f"no answer within {timeout:g} s"
    if "refused" in low:
        return "connection refused"
    if "incompleteread" in low or "prematurely" in low or "chunkedencodingerror" in low:
        return "body truncated (connection closed early)"
    if "reset by peer" in low or "connectionreset" in low:
        return "connection reset"
    if "remotedisconnected" in low or "closed connection without response" in low:
        return "server closed the connection without answering"
    if "name or service not known" in low or "failed to resolve" in low or "nodename" in low:
        return "host name not found"
    if isinstance(exc, requests.exceptions.SSLError):
        return "TLS error"
    if isinstance(exc, requests.exceptions.Timeout):
        return f"timed out ({timeout:g} s)"
    return f"transport error ({type(exc).__name__})"


def status_fault(resp: requests.Response) -> Fault:
    """The :class:`Fault` for a response whose status is not the one expected."""
    code = resp.status_code
    reason = (resp.reason or "").strip()
    why = f"HTTP {code} {reason}".rstrip() if reason.isprintable() and len(reason) < 60 else f"HTTP {code}"
    return Fault(why, transient=code in _RETRY_STATUS, status=code, auth=code in _AUTH_STATUS)


class Client(Transport):
    """The HTTP session, with the failure budget and the counters shared by a tier's two stores."""

    def __init__(
        self,
        base: str,
        auth: requests.auth.AuthBase,
        *,
        name: str,
        warn: Callable[[str], None],
        timeout: float,
        retries: int,
        jobs: int,
        max_failures: int,
        backoff: float,
    ) -> None:
        import requests
        import requests.adapters

        class _Adapter(requests.adapters.HTTPAdapter):
            def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
                kwargs["blocksize"] = CHUNK  # upload in 1 MiB writes, not urllib3's 16 KiB
                super().init_poolmanager(*args, **kwargs)

        super().__init__(name=name, warn=warn, timeout=timeout, retries=retries, max_failures=max_failures,
                         backoff=backoff)
        self.base = base
        self.session = requests.Session()
        self.session.auth = auth
        self.session.headers.update({"Accept-Encoding": "identity", "User-Agent": "ptebuild"})
        adapter = _Adapter(pool_connections=2, pool_maxsize=max(1, jobs), max_retries=0)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def close(self) -> None:
        """Close the pooled connections."""
        self.session.close()

    def url(self, path: str) -> str:
        return f"{self.base}/{quote(path)}"

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """One request, no retry; transport exceptions become :class:`Fault`."""
        import requests

        try:
            return self.session.request(
                method,
                self.url(path),
                timeout=(self.timeout, self.timeout),
                allow_redirects=False,
                **kwargs,
            )
        except requests.RequestException as exc:
            why = describe(exc, self.timeout)
        raise Fault(why)
