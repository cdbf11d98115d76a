"""Fixtures of the remote-cache tests: a real nginx (WebDAV PUT), a real BuildGrid (REAPI over
gRPC) and fault-injecting proxies in front of them.

Registered by ``tests/remote/conftest.py`` (the front end and build tests) and by
``tests/store/conftest.py`` (the HTTP tier's tests), which import them from here.

``nginx`` (session): Debian's nginx on a free 127.0.0.1 port, in its own folder under pytest's
temp dir, stopped at the end. Skipped, with the reason, only if nginx is not installed
(``apt-get install nginx``; ``./bootstrap.sh --test`` does it).

``space``: a fresh path prefix on that nginx for one test (its URL and its folder), so tests never
share entries.

``proxy``: ``tests/remote/faultproxy.py`` in its own process, forwarding to nginx; the test
arms faults through it (see :class:`Proxy`). ``closed_port``: a loopback port nothing listens on.

``buildgrid`` (session): BuildGrid 0.4.4 from ``.venv-buildgrid`` on a free 127.0.0.1 port
(``tests/remote/buildgrid_server.py``), one for the session (it takes 5-17 s to start here);
tests share it and keep apart by content (random blobs, keys of their own). Skipped, with the
reason, if it is not installed (``./bootstrap.sh --test``); under CI that fails.
``grpc_proxy``: ``tests/remote/grpcproxy.py`` in its own process, forwarding to BuildGrid, armed
as ``proxy`` is (see :class:`GrpcProxy`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from buildgrid_server import BuildGrid, bgd_binary, start_buildgrid
from helpers import unavailable
from nginx_server import Nginx, free_port, has_dav_module, nginx_binary, start_nginx

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def nginx(tmp_path_factory: pytest.TempPathFactory):
    binary = nginx_binary()
    if binary is None:
        unavailable("nginx is not installed: apt-get install nginx (Debian), or ./bootstrap.sh --test")
    if not has_dav_module(binary):
        unavailable(f"{binary} has no WebDAV module (http_dav_module): install Debian's nginx package")
    server = start_nginx(tmp_path_factory.mktemp("nginx"), binary)
    try:
        yield server
    finally:
        server.stop()


@dataclass
class CacheSpace:
    """One test's prefix on the shared nginx: its URL and the folder that holds its files."""

    server: Nginx
    prefix: str

    @property
    def url(self) -> str:
        return f"{self.server.url}/{self.prefix}"

    @property
    def dir(self) -> Path:
        return self.server.root / self.prefix

    def files(self) -> list[str]:
        """The stored files, as ``cas/<digest>`` and ``ac/<key>`` paths, sorted."""
        if not self.dir.exists():
            return []
        return sorted(str(p.relative_to(self.dir)) for p in self.dir.rglob("*") if p.is_file())

    def requests(self) -> list[str]:
        """The nginx access-log lines of this prefix (``METHOD URI STATUS BYTES``)."""
        return [line for line in self.server.requests() if f" /{self.prefix}/" in line]


@pytest.fixture
def space(nginx: Nginx) -> CacheSpace:
    return CacheSpace(nginx, f"t-{uuid.uuid4().hex[:12]}")


class Proxy:
    """Control of a running faultproxy process: ``url`` forwards to nginx unless a fault is armed."""

    script = "faultproxy.py"

    def __init__(self, upstream: str, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / self.script), upstream, *extra],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        line = self.proc.stdout.readline()  # "PORT CONTROL_PORT", printed once listening
        if not line:
            self.proc.kill()
            raise RuntimeError("faultproxy did not start")
        self.port, self.control_port = (int(x) for x in line.split())

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _post(self, path: str, args: dict) -> dict:
        import requests

        resp = requests.post(f"http://127.0.0.1:{self.control_port}{path}", data=json.dumps(args), timeout=5)
        resp.raise_for_status()
        return resp.json()

    def fault(self, mode: str, times: int = -1, **kwargs) -> None:
        """Arm ``mode`` for the next ``times`` requests (-1: all); kwargs: match, methods, delay, code."""
        self._post("/fault", {"mode": mode, "times": times, **kwargs})

    def die_after(self, n: int) -> None:
        self._post("/die", {"after": n})

    def reset(self) -> None:
        self._post("/reset", {})

    def log(self) -> list[list]:
        """``[method, path, status, headers]`` of each request the proxy saw."""
        import requests

        return requests.get(f"http://127.0.0.1:{self.control_port}/log", timeout=5).json()["requests"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=5)
        self.proc.stdout.close()


class GrpcProxy(Proxy):
    """Control of a running grpcproxy process, in front of BuildGrid: ``url`` is ``grpc://...``.
    ``fault`` takes ``match`` (part of a method's path), ``delay`` and ``code`` (a gRPC status name)."""

    script = "grpcproxy.py"

    @property
    def url(self) -> str:
        return f"grpc://127.0.0.1:{self.port}"

    def log(self) -> list[list]:
        """``[method, metadata, status]`` of each call the proxy saw."""
        import requests

        return requests.get(f"http://127.0.0.1:{self.control_port}/log", timeout=5).json()["calls"]


@pytest.fixture
def proxy(nginx: Nginx):
    p = Proxy(nginx.url)
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="session")
def buildgrid(tmp_path_factory: pytest.TempPathFactory):
    binary = bgd_binary()
    if binary is None:
        unavailable("BuildGrid is not installed: ./bootstrap.sh --test makes .venv-buildgrid (constraints-buildgrid.txt)")
    server = start_buildgrid(tmp_path_factory.mktemp("buildgrid"), binary)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def grpc_proxy(buildgrid: BuildGrid):
    p = GrpcProxy(buildgrid.target)
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture
def closed_port() -> int:
    return free_port()


@pytest.fixture(autouse=True)
def _no_env_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback only: an http_proxy in the environment must not reroute the tests' requests."""
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy",
                 "PTEBUILD_REMOTE_CACHE_HEADER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
