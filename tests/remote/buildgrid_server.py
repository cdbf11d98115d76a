"""Start a real BuildGrid (a REAPI server: the gRPC tier's tests) on loopback, as a cache only.

BuildGrid 0.4.4, the last release for Python 3.11, lives in its own venv, ``.venv-buildgrid/``
(``./bootstrap.sh --test`` makes it from ``constraints-buildgrid.txt``: its dependencies conflict
with ptebuild's). ``$PTEBUILD_TEST_BUILDGRID`` names another ``bgd`` (``none``: as if it were not
installed, for the tests of the tests).

The server is what a team would run as a cache: the ActionCache (accepting updates), the CAS and
ByteStream (and Capabilities, which BuildGrid adds by itself), in memory, on ``127.0.0.1:PORT``
without TLS or authentication, instance name ``""``. Everything lives in one folder:
``buildgrid.yml``, ``buildgrid.log``. Readiness is polled with GetCapabilities (BuildGrid takes
5-17 s to start here: imports and config validation), never waited for with a sleep.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from helpers import ROOT, free_port

CONFIG = """\
description: ptebuild test cache (loopback only)
server:
  - !channel
    address: "127.0.0.1:{port}"
    insecure-mode: true
authorization:
  method: none
monitoring:
  enabled: false
thread-pool-size: 16
storages:
  - !lru-storage &cas-storage
    size: 1024MB
caches:
  - !lru-action-cache &ac
    storage: *cas-storage
    max-cached-refs: 100000
    allow-updates: true
    cache-failed-actions: true
instances:
  - name: ""
    services:
      - !action-cache
        cache: *ac
      - !cas
        storage: *cas-storage
      - !bytestream
        storage: *cas-storage
"""


def bgd_binary() -> str | None:
    """BuildGrid's ``bgd`` (``$PTEBUILD_TEST_BUILDGRID``, else ``.venv-buildgrid/bin/bgd``), or None."""
    given = os.environ.get("PTEBUILD_TEST_BUILDGRID")
    if given:
        return None if given == "none" else given
    path = ROOT / ".venv-buildgrid" / "bin" / "bgd"
    return str(path) if path.is_file() else None


@dataclass
class BuildGrid:
    """A running BuildGrid: its folder, port and process."""

    dir: Path
    port: int
    proc: subprocess.Popen

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"grpc://{self.target}"

    def log(self) -> str:
        try:
            return (self.dir / "buildgrid.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        """SIGTERM (BuildGrid stops in under a second), then SIGKILL after 10 s; wait for it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def answers(target: str, timeout: float = 1.0) -> bool:
    """True once a REAPI server at ``target`` answers GetCapabilities for the instance ``""``."""
    import grpc

    with grpc.insecure_channel(target) as channel:
        ask = channel.unary_unary("/build.bazel.remote.execution.v2.Capabilities/GetCapabilities")
        try:
            ask(b"", timeout=timeout)
            return True
        except grpc.RpcError as exc:
            return exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def start_buildgrid(folder: Path, binary: str | None = None, attempts: int = 3, deadline_s: float = 90.0) -> BuildGrid:
    """Start BuildGrid in ``folder`` on a free loopback port; raise RuntimeError if it will not start."""
    binary = binary or bgd_binary()
    if binary is None:
        raise RuntimeError("BuildGrid is not installed (./bootstrap.sh --test makes .venv-buildgrid)")
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    last = ""
    for _ in range(attempts):  # the free port may be taken between the probe and the bind
        port = free_port()
        config = folder / "buildgrid.yml"
        config.write_text(CONFIG.format(port=port))
        with open(folder / "buildgrid.log", "wb") as log:
            proc = subprocess.Popen([binary, "server", "start", str(config)], stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=folder)
        server = BuildGrid(folder, port, proc)
        end = time.monotonic() + deadline_s
        while time.monotonic() < end and proc.poll() is None:
            if answers(server.target):
                return server
            time.sleep(0.1)  # between polls of a server still importing
        last = server.log().strip()[-2000:]
        server.stop()
    raise RuntimeError(f"BuildGrid did not start in {folder}: {last or 'no message'}")
