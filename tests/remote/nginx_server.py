"""Start a real nginx (Debian's ``nginx`` package) as a Bazel-style HTTP cache on loopback.

Used by the remote-tier tests (``cache_fixtures.py``) and by ``bench/bench_remote.py``. The server is
a plain nginx with WebDAV uploads, the setup the issue names::

    location / { dav_methods PUT; create_full_put_path on; client_max_body_size 0; }

Everything lives in one folder: ``nginx.conf``, ``nginx.pid``, ``error.log``, ``access.log``
(one line per request: ``METHOD URI STATUS BYTES``), the temp dirs and ``root/``, the document
root whose files are the cache's blobs and entries (``root/<prefix>/cas/<sha256>``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

CONF = """\
{user}
worker_processes 2;
daemon off;
master_process on;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 256; }}
http {{
    log_format ptebuild '$request_method $request_uri $status $body_bytes_sent';
    access_log {dir}/access.log ptebuild;
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 10000;
    server {{
        listen 127.0.0.1:{port};
        server_name localhost;
        root {dir}/root;
        location / {{
            dav_methods PUT;
            create_full_put_path on;
            dav_access user:rw group:r all:r;
            client_max_body_size 0;
        }}
    }}
}}
"""


def nginx_binary() -> str | None:
    """The nginx executable (``$PTEBUILD_TEST_NGINX``, else PATH, then /usr/sbin), or None if it
    is not installed (``$PTEBUILD_TEST_NGINX=none``: as if it were not, for the tests of the tests)."""
    given = os.environ.get("PTEBUILD_TEST_NGINX")
    if given:
        return None if given == "none" else given
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")


def has_dav_module(binary: str) -> bool:
    """True if ``nginx -V`` lists the WebDAV module (``--with-http_dav_module``)."""
    proc = subprocess.run([binary, "-V"], capture_output=True, text=True, timeout=10)
    return "http_dav_module" in proc.stderr + proc.stdout


from helpers import free_port


def wait_listening(port: int, deadline_s: float = 10.0) -> bool:
    """Poll until something accepts connections on 127.0.0.1:port; False after ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.02)
    return False


@dataclass
class Nginx:
    """A running nginx: its folder, port, document root and process."""

    dir: Path
    port: int
    proc: subprocess.Popen

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def root(self) -> Path:
        return self.dir / "root"

    @property
    def access_log(self) -> Path:
        return self.dir / "access.log"

    def requests(self) -> list[str]:
        """The access log's lines so far (``METHOD URI STATUS BYTES``)."""
        try:
            return self.access_log.read_text().splitlines()
        except FileNotFoundError:
            return []

    def stop(self) -> None:
        """Stop nginx (SIGQUIT, then SIGKILL after 5 s) and wait for it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_nginx(folder: Path, binary: str | None = None, attempts: int = 3) -> Nginx:
    """Start nginx in ``folder`` on a free loopback port; raise RuntimeError if it will not start."""
    binary = binary or nginx_binary()
    if binary is None:
        raise RuntimeError("nginx is not installed (Debian: apt-get install nginx)")
    folder = Path(folder).resolve()
    for sub in ("root", "tmp", "logs"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    # Run as root, nginx switches its workers to 'nobody', who cannot write our temp folders.
    user = "user root;" if os.geteuid() == 0 else ""
    last_error = ""
    for _ in range(attempts):  # the free port may be taken between the probe and the bind
        port = free_port()
        conf = folder / "nginx.conf"
        conf.write_text(CONF.format(user=user, dir=folder, port=port))
        with open(folder / "stderr.log", "wb") as stderr:
            proc = subprocess.Popen(
                [binary, "-p", str(folder), "-c", str(conf), "-e", str(folder / "error.log")],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )
        end = time.monotonic() + 10
        while time.monotonic() < end and proc.poll() is None:
            if wait_listening(port, 0.2):
                return Nginx(folder, port, proc)
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=5)
        last_error = (folder / "stderr.log").read_text(errors="replace").strip()
    raise RuntimeError(f"nginx did not start in {folder}: {last_error or 'no message'}")
