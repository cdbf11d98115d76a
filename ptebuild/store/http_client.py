"""The remote tier's HTTP client: one ``requests`` session, retries, the failure budget, counters.

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
``429`` or truncated body is retried ``retries`` times with exponential backoff; ``404`` is a
miss. Each operation that met a fault it recovered from, or gave up on (a miss, or a blob not
uploaded), is reported in one line through ``warn``, starting with the tier's name. Every
failed request counts; at ``max_failures`` in one build the client raises
:class:`~ptebuild.errors.StoreError` (now and on every later call, without the network), and the
cache front end switches the tier off. ``401``/``403``/``407`` on a read switch the tier off at
once; on an upload they turn uploads off (one warning). Exception messages do not repeat the
tier's name: the front end puts it first (``remote cache http://host:8080 disabled for this
build: 3 failed requests (last: GET ac/<key>: connection refused)``).

A fault is described by a fixed phrase (:func:`describe`, :func:`status_fault`), never by a
library's exception text, which may carry a URL or a header.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from ptebuild.errors import StoreError

CHUNK = 1 << 20
"""Bytes per read and write of a streamed body."""

_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_AUTH_STATUS = frozenset({401, 403, 407})


def describe(exc: BaseException, timeout: float) -> str:
    """A fixed phrase for a transport exception (never its text, which may carry a URL)."""
    import requests

    text = ""
    seen: set[int] = set()
    node: BaseException | None = exc
    while node is not None and id(node) not in seen:  # the reason sits a few causes deep
        seen.add(id(node))
        text += f" {type(node).__name__} {node}"
        node = node.__cause__ or node.__context__
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


class Fault(Exception):
    """One failed request: ``why`` is a safe phrase; ``transient`` faults are retried."""

    def __init__(self, why: str, transient: bool = True, status: int | None = None) -> None:
        super().__init__(why)
        self.why = why
        self.transient = transient
        self.status = status


def status_fault(resp) -> Fault:
    """The :class:`Fault` for a response whose status is not the one expected."""
    code = resp.status_code
    reason = (resp.reason or "").strip()
    why = f"HTTP {code} {reason}".rstrip() if reason.isprintable() and len(reason) < 60 else f"HTTP {code}"
    return Fault(why, transient=code in _RETRY_STATUS, status=code)


class Client:
    """The HTTP session, the failure budget and the counters shared by a tier's two stores."""

    def __init__(
        self,
        base: str,
        auth,
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
            def init_poolmanager(self, *args, **kwargs):
                kwargs["blocksize"] = CHUNK  # upload in 1 MiB writes, not urllib3's 16 KiB
                super().init_poolmanager(*args, **kwargs)

        self.base = base
        self.name = name
        self.warn_fn = warn
        self.timeout = timeout
        self.retries = max(0, retries)
        self.max_failures = max(1, max_failures)
        self.backoff = backoff
        self.session = requests.Session()
        self.session.auth = auth
        self.session.headers.update({"Accept-Encoding": "identity", "User-Agent": "ptebuild"})
        adapter = _Adapter(pool_connections=2, pool_maxsize=max(1, jobs), max_retries=0)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.lock = threading.Lock()
        self.warn_lock = threading.Lock()
        self.counts = dict.fromkeys(("hits", "misses", "refused", "downloads", "uploads", "errors", "bytes_down", "bytes_up"), 0)
        self.disabled: str | None = None
        self.upload_off = False

    # counters and messages
    def count(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] += n

    def warn(self, message: str) -> None:
        with self.warn_lock:  # not self.lock: the callback may well ask for stats()
            self.warn_fn(f"{self.name}: {message}")

    def check_on(self) -> None:
        if self.disabled is not None:
            raise StoreError(self.disabled)

    def failed(self, what: str, why: str) -> None:
        """Count one failed request; raise StoreError once the build's budget is spent."""
        with self.lock:
            self.counts["errors"] += 1
            if self.disabled is None and self.counts["errors"] >= self.max_failures:
                self.disabled = (
                    f"{self.counts['errors']} failed requests (last: {what}: {why})"
                )
        self.check_on()

    def switch_off(self, message: str) -> None:
        with self.lock:
            if self.disabled is None:
                self.disabled = message
        self.check_on()

    def url(self, path: str) -> str:
        return f"{self.base}/{quote(path)}"

    def call(
        self, method: str, path: str, attempt: Callable[[], Any], *, upload: bool = False, warn_give_up: bool = True
    ) -> tuple[bool, Any]:
        """Run ``attempt`` (one request) with retries: ``(True, result)``, or ``(False, why)``.

        ``attempt`` raises :class:`Fault` for a failed request. Gives one warning per call that
        met a fault: recovered, or given up on (unless ``warn_give_up`` is False: the caller
        reports it another way). Raises StoreError when the failure budget is spent or the server
        refuses the credentials of a read.
        """
        self.check_on()
        what = f"{method} {path}"
        faults: list[str] = []
        for i in range(self.retries + 1):
            if i:
                time.sleep(self.backoff * (2 ** (i - 1)) * (0.75 + 0.5 * random.random()))
                self.check_on()
            fault: Fault | None = None
            try:
                result = attempt()
            except Fault as caught:
                fault = caught
            if fault is None:
                if faults:
                    tries = "1 retry" if len(faults) == 1 else f"{len(faults)} retries"
                    self.warn(f"{what}: {faults[-1]}; succeeded after {tries}")
                return True, result
            # Handled outside the except clause, so a StoreError raised here chains nothing.
            faults.append(fault.why)
            if fault.status in _AUTH_STATUS:
                self.count("errors")
                if not upload:
                    self.switch_off(f"{what}: {fault.why} (check the credentials: --remote-cache-header)")
                with self.lock:
                    first, self.upload_off = not self.upload_off, True
                if first:
                    self.warn(f"{what}: {fault.why}; uploads turned off for this build")
                return False, fault.why
            self.failed(what, fault.why)
            if not fault.transient:
                break
        if warn_give_up:
            self.warn(f"{what}: {faults[-1]}; {'not uploaded' if upload else 'treated as a miss'}")
        return False, faults[-1]

    def request(self, method: str, path: str, **kwargs):
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
