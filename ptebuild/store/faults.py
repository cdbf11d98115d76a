"""A remote tier's faults: retries with backoff, the failure budget, the counters, the warnings.

The same for every protocol: the HTTP tier's client (:mod:`.http_client`) and the gRPC tier
(:mod:`.grpc`) are each a :class:`Budget` with a transport of their own.

A transport turns one failed request into a :class:`Fault`: a fixed phrase (never a library's
exception text, which may carry a URL or a header), whether it is worth a retry (a timeout, a
connection error, an overloaded server), and whether the server refused the credentials.
:meth:`Budget.call` retries a transient fault ``retries`` times with exponential backoff (and
jitter), and reports each operation that met a fault in one line through ``warn``, starting with
the tier's name: recovered (``...; succeeded after 1 retry``) or given up on (``...; treated as a
miss`` / ``...; not uploaded``). Every failed request counts; at ``max_failures`` in one build the
budget raises :class:`~ptebuild.errors.StoreError`, now and on every later call without the
network, and the cache front end switches the tier off. Refused credentials switch the tier off
at once on a read; on an upload they turn uploads off, with one warning. Exception messages do
not repeat the tier's name: the front end puts it first (``remote cache http://host:8080
disabled for this build: 3 failed requests (last: GET ac/<key>: connection refused)``).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

from ptebuild.errors import StoreError

COUNTERS = ("hits", "misses", "refused", "downloads", "uploads", "errors", "bytes_down", "bytes_up")
"""A tier's counters (:meth:`Budget.count`): entries found, missed, refused (a bad signature...);
blobs downloaded; blobs and entries uploaded; failed requests; bytes both ways."""

CREDENTIALS_HINT = "check the credentials: --remote-cache-header"


class Fault(Exception):
    """One failed request: ``why`` is a safe phrase; ``transient`` faults are retried; ``auth``:
    the server refused the credentials. ``status``: the protocol's status code, if it sent one."""

    def __init__(self, why: str, transient: bool = True, status: int | None = None, auth: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.transient = transient
        self.status = status
        self.auth = auth


class Budget:
    """The retries, failure budget and counters shared by a remote tier's two stores."""

    def __init__(self, *, name: str, warn: Callable[[str], None], timeout: float, retries: int, max_failures: int,
                 backoff: float) -> None:
        self.name = name
        self.warn_fn = warn
        self.timeout = timeout
        self.retries = max(0, retries)
        self.max_failures = max(1, max_failures)
        self.backoff = backoff
        self.lock = threading.Lock()
        self.warn_lock = threading.Lock()
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.disabled: str | None = None
        self.upload_off = False

    def count(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] += n

    def stats(self) -> dict[str, Any]:
        """The counters, and ``disabled`` (bool)."""
        with self.lock:
            out: dict[str, Any] = dict(self.counts)
        out["disabled"] = self.disabled is not None
        return out

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
                self.disabled = f"{self.counts['errors']} failed requests (last: {what}: {why})"
        self.check_on()

    def switch_off(self, message: str) -> None:
        with self.lock:
            if self.disabled is None:
                self.disabled = message
        self.check_on()

    def turn_uploads_off(self, what: str, why: str) -> None:
        """Uploads off for the rest of the build, with one warning (the first time)."""
        with self.lock:
            first, self.upload_off = not self.upload_off, True
        if first:
            self.warn(f"{what}: {why}; uploads turned off for this build")

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
            if fault.auth:
                self.count("errors")
                if not upload:
                    self.switch_off(f"{what}: {fault.why} ({CREDENTIALS_HINT})")
                self.turn_uploads_off(what, fault.why)
                return False, fault.why
            self.failed(what, fault.why)
            if not fault.transient:
                break
        if warn_give_up:
            self.warn(f"{what}: {faults[-1]}; {'not uploaded' if upload else 'treated as a miss'}")
        return False, faults[-1]
