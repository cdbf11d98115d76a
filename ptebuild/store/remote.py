"""The remote cache tier: Bazel's HTTP cache protocol, spoken with ``requests``.

Any server of Bazel's HTTP remote cache works: bazel-remote, Buildbarn, BuildBuddy, or nginx
with WebDAV uploads (``dav_methods PUT; create_full_put_path on; client_max_body_size 0;``).
Protocol: https://bazel.build/remote/caching#http-caching

Wire format
===========

The base URL ``U`` is ``http://`` or ``https://``, host, optional port and path prefix. A
``user:password@`` in it is sent as HTTP Basic auth; a query string or fragment is refused (put
a token in a header). Two namespaces, as Bazel lays them out::

    GET | HEAD | PUT  U/cas/<sha256>   a blob: its raw bytes; <sha256> is 64 lowercase hex
    GET | PUT         U/ac/<key>       an action entry; <key> is 16-128 lowercase hex

Status codes: ``200`` a hit; ``404`` absent (a miss, not an error); ``200``/``201``/``204`` a
stored PUT. Requests are never redirected (a ``3xx`` is an error), so headers never travel to
another host. Blobs are uploaded and downloaded streamed (``Content-Length`` set, 1 MiB chunks)
and never held in memory; ``Accept-Encoding: identity``. PUT always writes (no HEAD first), so an
upload repairs a damaged blob on the server. Connections are pooled (``jobs`` of them) and reused.
Proxies and CA bundles come from the environment as ``requests`` reads them (``HTTPS_PROXY``,
``NO_PROXY``, ``REQUESTS_CA_BUNDLE``); ``~/.netrc`` is not used.

An action entry is not Bazel's ``ActionResult`` protobuf but ptebuild's own document: UTF-8
canonical JSON (``sort_keys``, separators ``,`` and ``:``, no trailing newline), at most
4 MiB::

    {"document": {...},                 # ptebuild.results.ActionResult.to_json()
     "format": "ptebuild-remote-action",
     "key": "<key>",                    # the key it is stored under (checked on read)
     "refs": ["<sha256>", ...],         # the blobs the document needs, all uploaded before it
     "signature": "hmac-sha256:<64 hex>",   # only when written with a secret
     "version": 1}

``signature`` is HMAC-SHA-256, keyed by the shared secret, of the canonical JSON of the entry
without its ``signature`` member: it covers the key and the refs too, so a signed entry cannot
be replayed under another key. A reader given a secret refuses (a miss and one warning) an
unsigned or mis-signed entry; a reader without a secret ignores signatures.

Faults
======

Every request has a timeout (connect and each read). A connection error, timeout, ``5xx``,
``429`` or truncated body is retried ``retries`` times with exponential backoff; ``404`` is a
miss. Each operation that met a fault it recovered from, or gave up on (a miss, or a blob not
uploaded), is reported in one line through ``warn``, starting with the tier's :attr:`name`.
Every failed request counts; at ``max_failures`` in one build the tier raises
:class:`~ptebuild.errors.StoreError` (now and on every later call, without the network), and the
cache front end switches it off. A blob whose bytes do not hash to its name raises
:class:`~ptebuild.errors.CorruptObject` at once (it counts as a failed request; it is not retried:
the server's bytes for a name do not change), and the partial file is removed: nothing is
published. ``401``/``403``/``407`` on a read switch the tier off at once; on an upload they turn
uploads off (one warning). Exception messages do not repeat the tier's name: the front end puts
it first (``remote cache http://host:8080 disabled for this build: 3 failed requests (last: GET
ac/<key>: connection refused)``).

Credentials
===========

Header values (``--remote-cache-header NAME=VALUE``) and URL userinfo live only in a
``requests`` auth object whose repr hides them. No message, repr, exception or statistic of this
module contains them: messages are built here from the server's sanitised name, the method and
the path, never from a library's exception text.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from ptebuild.canonical import canonical_bytes
from ptebuild.errors import CorruptObject, StoreError, UsageError

ENTRY_FORMAT = "ptebuild-remote-action"
ENTRY_VERSION = 1
SIGNATURE_PREFIX = "hmac-sha256:"
MAX_ENTRY_BYTES = 4 << 20
CHUNK = 1 << 20
HEADER_ENV = "PTEBUILD_REMOTE_CACHE_HEADER"
"""Environment variable with extra headers: ``NAME=VALUE``, several separated by newlines."""

_DIGEST_RE = re.compile(r"[0-9a-f]{64}")
_KEY_RE = re.compile(r"[0-9a-f]{16,128}")
_TOKEN_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP header name (RFC 9110 token)
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_AUTH_STATUS = frozenset({401, 403, 407})


# --- configuration helpers (for the command line) -------------------------------------------


def parse_header(text: str, origin: str = "--remote-cache-header") -> tuple[str, str]:
    """``"NAME=VALUE"`` -> ``(NAME, VALUE)``; raise UsageError (never quoting the value)."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not _TOKEN_RE.fullmatch(name):
        raise UsageError(f"{origin}: expected NAME=VALUE with NAME an HTTP header name")
    if any(c in value for c in "\r\n\0"):
        raise UsageError(f"{origin}: the value of header {name} contains a line break or NUL")
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


def _split_url(url: str) -> tuple[str, tuple[str, str] | None]:
    """``(base URL without userinfo, (user, password) or None)``; raise UsageError if unusable."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise UsageError("--remote-cache: not a valid URL (expected http[s]://host[:port][/prefix])") from None
    safe = sanitize_url(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--remote-cache: {safe!r} is not an http:// or https:// URL with a host")
    if parts.query or parts.fragment:
        raise UsageError(
            f"--remote-cache {safe}: a query string or fragment is not supported; "
            "pass a token with --remote-cache-header NAME=VALUE"
        )
    userinfo = None
    if "@" in parts.netloc:
        user, _, password = parts.netloc.rpartition("@")[0].partition(":")
        userinfo = (unquote(user), unquote(password))
    return safe, userinfo


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8: the bytes that are stored and signed."""
    return canonical_bytes(value)


def sign(entry: Mapping[str, Any], secret: bytes) -> str:
    """The ``signature`` member for ``entry`` (its other members): ``hmac-sha256:<hex>``."""
    body = {k: v for k, v in entry.items() if k != "signature"}
    return SIGNATURE_PREFIX + hmac.new(secret, canonical_json(body), hashlib.sha256).hexdigest()


def _short(digest: str) -> str:
    return digest[:12]


def _describe(exc: BaseException, timeout: float) -> str:
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


class _Fault(Exception):
    """One failed request: ``why`` is a safe phrase; ``transient`` faults are retried."""

    def __init__(self, why: str, transient: bool = True, status: int | None = None) -> None:
        super().__init__(why)
        self.why = why
        self.transient = transient
        self.status = status


def _make_auth(headers: Mapping[str, str], userinfo: tuple[str, str] | None):
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

        def __call__(self, r):
            r.headers.update(self._headers)
            return r

        def __repr__(self) -> str:
            return f"<credentials: {', '.join(sorted(self._headers)) or 'none'}>"

        __str__ = __repr__

    return _Credentials()


class _Client:
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
        self.counts = {k: 0 for k in ("hits", "misses", "refused", "downloads", "uploads", "errors", "bytes_down", "bytes_up")}
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

        ``attempt`` raises :class:`_Fault` for a failed request. Gives one warning per call that
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
            fault: _Fault | None = None
            try:
                result = attempt()
            except _Fault as caught:
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
        """One request, no retry; transport exceptions become :class:`_Fault`."""
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
            why = _describe(exc, self.timeout)
        raise _Fault(why)


def _status_fault(resp) -> _Fault:
    code = resp.status_code
    reason = (resp.reason or "").strip()
    why = f"HTTP {code} {reason}".rstrip() if reason.isprintable() and len(reason) < 60 else f"HTTP {code}"
    return _Fault(why, transient=code in _RETRY_STATUS, status=code)


def _check_digest(digest: str) -> str:
    if not isinstance(digest, str) or not _DIGEST_RE.fullmatch(digest):
        raise ValueError(f"not a SHA-256 digest (64 lowercase hex): {digest!r}")
    return digest


def _check_key(key: str) -> str:
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise ValueError(f"not an action key (16-128 lowercase hex): {key!r}")
    return key


class HttpBlobStore:
    """``/cas/<sha256>``: blobs, streamed and verified. Implements :class:`~ptebuild.store.tiers.BlobStore`."""

    def __init__(self, client: _Client, upload: bool, jobs: int) -> None:
        self._c = client
        self._upload = upload
        self._jobs = max(1, jobs)
        self._lock = threading.Lock()
        self._present: set[str] = set()
        """Blobs known to be on the server in this build (uploaded, fetched or seen by has)."""
        self._failed: set[str] = set()
        """Blobs whose upload failed in this build: no entry naming them is uploaded."""

    def __repr__(self) -> str:
        return f"<blobs of {self._c.name}>"

    def _known(self, digest: str, present: bool) -> None:
        with self._lock:
            if present:
                self._present.add(digest)
                self._failed.discard(digest)
            else:
                self._present.discard(digest)

    def has(self, digest: str) -> bool:
        """True if the server has the blob (HEAD). A fault is a False, after one warning."""
        path = f"cas/{_check_digest(digest)}"

        def attempt() -> bool:
            resp = self._c.request("HEAD", path)
            with resp:
                if resp.status_code == 404:
                    return False
                if resp.status_code != 200:
                    raise _status_fault(resp)
                return True

        ok, found = self._c.call("HEAD", path, attempt)
        found = bool(ok and found)
        self._known(digest, found)
        return found

    def fetch(self, digest: str, dest: Path) -> bool:
        """Download the blob into the new file ``dest``, verified while streaming; False if absent.

        The bytes go to a temporary file next to ``dest``, renamed into place once their SHA-256
        is ``digest``. Raises CorruptObject on wrong bytes (or a body truncated on every try),
        StoreError if the tier is switched off, OSError if ``dest``'s folder cannot be written.
        """
        path = f"cas/{_check_digest(digest)}"
        dest = Path(dest)
        body_fault = [False]  # the last try failed while reading the body

        def attempt() -> tuple[str, int] | None:
            import requests

            body_fault[0] = False
            resp = self._c.request("GET", path, stream=True)
            with resp:
                if resp.status_code == 404:
                    return None
                if resp.status_code != 200:
                    raise _status_fault(resp)
                tmp = dest.parent / f".{dest.name}.{os.urandom(6).hex()}.part"
                h = hashlib.sha256()
                size = 0
                try:
                    with open(tmp, "xb") as out:
                        try:
                            for chunk in resp.iter_content(CHUNK):
                                h.update(chunk)
                                out.write(chunk)
                                size += len(chunk)
                        except requests.RequestException as exc:
                            why = _describe(exc, self._c.timeout)
                        else:
                            why = ""
                except BaseException:
                    _unlink(tmp)
                    raise
                finally:
                    self._c.count("bytes_down", size)
                if why:
                    _unlink(tmp)
                    body_fault[0] = True
                    raise _Fault(why)
                got = h.hexdigest()
                if got != digest:
                    _unlink(tmp)
                    return got, size
                try:
                    os.replace(tmp, dest)
                except BaseException:
                    _unlink(tmp)
                    raise
                return digest, size

        ok, result = self._c.call("GET", path, attempt, warn_give_up=False)
        if not ok:
            if body_fault[0]:  # reported by the exception, not by a warning too
                raise CorruptObject(
                    f"blob {_short(digest)} did not arrive whole in {self._c.retries + 1} tries (last: {result})"
                )
            self._c.warn(f"GET {path}: {result}; treated as a miss")
            return False
        if result is None:
            self._known(digest, False)
            return False
        got, size = result
        if got != digest:
            self._c.failed(f"GET {path}", "wrong bytes")
            raise CorruptObject(
                f"blob {_short(digest)} has wrong bytes ({size} bytes hashing to {_short(got)})"
            )
        self._c.count("downloads")
        self._known(digest, True)
        return True

    def put_file(self, path: Path, digest: str | None = None) -> tuple[str, int]:
        """Upload the file's bytes (streamed) to ``/cas/<digest>``; return ``(sha256, size)``.

        ``digest`` is trusted if given (the front end hashed the file); else the file is hashed
        first. With uploads off, nothing is sent. A failed upload is warned about and remembered:
        no action entry naming this blob is uploaded in this build. Raises StoreError if the
        tier is switched off, OSError if the file cannot be read.
        """
        path = Path(path)
        if digest is None:
            from ptebuild.hashing import hash_file

            digest, size = hash_file(path)
        else:
            _check_digest(digest)
            size = os.stat(path).st_size
        if not self._upload or self._c.upload_off:
            return digest, size
        rel = f"cas/{digest}"

        def attempt() -> None:
            with open(path, "rb") as body:
                resp = self._c.request(
                    "PUT", rel, data=body, headers={"Content-Type": "application/octet-stream"}
                )
            with resp:
                if resp.status_code not in (200, 201, 204):
                    raise _status_fault(resp)

        ok, _ = self._c.call("PUT", rel, attempt, upload=True)
        if ok:
            self._c.count("uploads")
            self._c.count("bytes_up", size)
            self._known(digest, True)
        else:
            with self._lock:
                self._failed.add(digest)
                self._present.discard(digest)
        return digest, size

    def fetch_many(self, items: Iterable[tuple[str, Path]]) -> list[bool]:
        """:meth:`fetch` each ``(digest, dest)`` on ``jobs`` threads; one bool per item, in order.

        Waits for all started transfers, then raises the first StoreError (the tier switched off)
        or else the first CorruptObject met.
        """
        return self._many(self.fetch, list(items))

    def put_many(self, items: Iterable[tuple[Path, str | None]]) -> list[tuple[str, int]]:
        """:meth:`put_file` each ``(path, digest)`` on ``jobs`` threads; results in order."""
        return self._many(self.put_file, list(items))

    def _many(self, fn, items: list[tuple]) -> list:
        if len(items) <= 1:
            return [fn(*item) for item in items]
        with ThreadPoolExecutor(max_workers=min(self._jobs, len(items)), thread_name_prefix="ptebuild-remote") as pool:
            futures = [pool.submit(fn, *item) for item in items]
            errors: list[BaseException] = []
            results = []
            for fut in futures:
                try:
                    results.append(fut.result())
                except BaseException as exc:  # noqa: BLE001 - re-raised below, once all are done
                    errors.append(exc)
                    results.append(None)
                    for other in futures:
                        other.cancel()
        if errors:
            hard = [e for e in errors if isinstance(e, StoreError) and not isinstance(e, CorruptObject)]
            raise (hard or errors)[0]
        return results

    def refs_missing(self, refs: Iterable[str]) -> list[str]:
        """The refs not known to be on the server (failed uploads; others checked with HEAD)."""
        missing = []
        for ref in refs:
            with self._lock:
                failed, present = ref in self._failed, ref in self._present
            if failed or (not present and not self.has(ref)):
                missing.append(ref)
        return missing


class HttpActionStore:
    """``/ac/<key>``: signed or plain JSON entries. Implements :class:`~ptebuild.store.tiers.ActionStore`."""

    def __init__(self, client: _Client, blobs: HttpBlobStore, upload: bool, secret: bytes | None) -> None:
        self._c = client
        self._blobs = blobs
        self._upload = upload
        self._secret = secret

    def __repr__(self) -> str:
        return f"<actions of {self._c.name}{' (signed)' if self._secret else ''}>"

    def get(self, key: str) -> dict[str, Any] | None:
        """The document stored under ``key``, or None (absent, faulty, or refused with a warning)."""
        path = f"ac/{_check_key(key)}"

        def attempt() -> bytes | None:
            import requests

            resp = self._c.request("GET", path, stream=True)
            with resp:
                if resp.status_code == 404:
                    return None
                if resp.status_code != 200:
                    raise _status_fault(resp)
                data = bytearray()
                why = ""
                try:
                    for chunk in resp.iter_content(64 << 10):
                        data += chunk
                        if len(data) > MAX_ENTRY_BYTES:
                            return b""
                except requests.RequestException as exc:
                    why = _describe(exc, self._c.timeout)
                finally:
                    self._c.count("bytes_down", len(data))
            if why:  # raised here, outside the handler: no library exception rides along
                raise _Fault(why)
            return bytes(data)

        ok, raw = self._c.call("GET", path, attempt)
        if not ok or raw is None:
            self._c.count("misses")
            return None
        problem, document = self._open(key, raw)
        if problem:
            self._c.count("misses")
            self._c.count("refused")
            self._c.warn(f"entry {path}: {problem}; refused")
            return None
        self._c.count("hits")
        return document

    def _open(self, key: str, raw: bytes) -> tuple[str, dict[str, Any] | None]:
        """``("", document)``, or ``(why it is refused, None)``."""
        if not raw:
            return f"larger than {MAX_ENTRY_BYTES >> 20} MiB", None
        try:
            entry = json.loads(raw)
        except ValueError:
            return "not JSON", None
        if not isinstance(entry, dict) or entry.get("format") != ENTRY_FORMAT:
            return "not a ptebuild entry", None
        if entry.get("version") != ENTRY_VERSION:
            return f"entry version {entry.get('version')!r}, expected {ENTRY_VERSION}", None
        if entry.get("key") != key:
            return "stored under another key than its own", None
        document, refs = entry.get("document"), entry.get("refs")
        if not isinstance(document, dict) or not isinstance(refs, list) or not all(
            isinstance(r, str) and _DIGEST_RE.fullmatch(r) for r in refs
        ):
            return "malformed document or refs", None
        if self._secret is not None:
            signature = entry.get("signature")
            if not isinstance(signature, str):
                return "unsigned (a secret is set)", None
            if not hmac.compare_digest(signature, sign(entry, self._secret)):
                return "wrong signature", None
        return "", document

    def put(self, key: str, document: dict[str, Any], refs: list[str]) -> None:
        """Upload ``document`` under ``key`` (signed if a secret is set), if every ref is on the server.

        With uploads off, nothing is sent. A ref whose upload failed in this build, or that the
        server lacks, keeps the entry back (one warning): an entry never names a missing blob.
        Raises StoreError if the tier is switched off.
        """
        path = f"ac/{_check_key(key)}"
        refs = sorted({_check_digest(r) for r in refs})
        if not self._upload or self._c.upload_off:
            return
        self._c.check_on()
        missing = self._blobs.refs_missing(refs)
        if missing:
            self._c.warn(f"entry {path} not uploaded: blob {_short(missing[0])} is not on the server")
            return
        entry: dict[str, Any] = {
            "document": document,
            "format": ENTRY_FORMAT,
            "key": key,
            "refs": refs,
            "version": ENTRY_VERSION,
        }
        if self._secret is not None:
            entry["signature"] = sign(entry, self._secret)
        body = canonical_json(entry)
        if len(body) > MAX_ENTRY_BYTES:
            self._c.warn(f"entry {path} not uploaded: larger than {MAX_ENTRY_BYTES >> 20} MiB")
            return

        def attempt() -> None:
            resp = self._c.request("PUT", path, data=body, headers={"Content-Type": "application/json"})
            with resp:
                if resp.status_code not in (200, 201, 204):
                    raise _status_fault(resp)

        ok, _ = self._c.call("PUT", path, attempt, upload=True)
        if ok:
            self._c.count("uploads")
            self._c.count("bytes_up", len(body))


class HttpTier:
    """A remote cache tier over Bazel's HTTP cache protocol (see the module docstring).

    ``url``: the cache's base URL (userinfo allowed, sent as Basic auth, never printed).
    ``headers``: extra request headers, e.g. ``{"Authorization": "Bearer ..."}`` (never printed).
    ``upload``: False for a read-only client (pull requests): ``put*`` send nothing.
    ``secret``: HMAC key; entries are signed on upload and checked on read.
    ``warn``: receives one line per fault recovered from (thread-safe: calls are serialised).
    ``timeout``: seconds for connecting and for each read. ``retries``: extra tries of a failed
    request. ``jobs``: parallel transfers (and pooled connections). ``max_failures``: failed
    requests after which the tier raises StoreError for the rest of the build. ``backoff``: the
    first retry's delay in seconds, doubled for each next one.

    Raises UsageError if the URL or a header is unusable.
    """

    source = "remote"

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        upload: bool = True,
        secret: bytes | None = None,
        warn: Callable[[str], None] = lambda s: None,
        timeout: float = 10.0,
        retries: int = 2,
        jobs: int = 4,
        max_failures: int = 3,
        backoff: float = 0.1,
    ) -> None:
        base, userinfo = _split_url(url)
        checked = dict(parse_header(f"{k}={v}", "remote cache header") for k, v in (headers or {}).items())
        self.name = f"remote cache {base}"
        self.url = base
        self._client = _Client(
            base,
            _make_auth(checked, userinfo),
            name=self.name,
            warn=warn,
            timeout=timeout,
            retries=retries,
            jobs=jobs,
            max_failures=max_failures,
            backoff=backoff,
        )
        self.blobs = HttpBlobStore(self._client, upload, jobs)
        self.actions = HttpActionStore(self._client, self.blobs, upload, secret or None)
        self._upload = upload

    @property
    def writable(self) -> bool:
        """True while uploads are on (off with ``upload=False`` or after a 401/403 on a PUT)."""
        return self._upload and not self._client.upload_off

    @property
    def disabled(self) -> str | None:
        """Why the tier is switched off for this build, or None."""
        return self._client.disabled

    def __repr__(self) -> str:
        return f"<HttpTier {self.url}>"

    def stats(self) -> dict[str, Any]:
        """hits, misses, refused (entries refused: bad signature...), downloads, uploads (blobs and
        entries), errors (failed requests), bytes_down, bytes_up, disabled (bool)."""
        with self._client.lock:
            out: dict[str, Any] = dict(self._client.counts)
        out["disabled"] = self._client.disabled is not None
        return out

    def close(self) -> None:
        """Close the pooled connections."""
        self._client.session.close()


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
