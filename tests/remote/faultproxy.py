"""A fault-injecting HTTP proxy for the remote-cache tests, run as its own process on loopback.

Run: ``python faultproxy.py UPSTREAM_URL``. It prints one line, ``PORT CONTROL_PORT``, then
serves until killed. Requests on PORT are forwarded to UPSTREAM_URL (streamed, HTTP/1.1
keep-alive) unless a fault is armed. The control port takes JSON::

    POST /fault  {"mode": M, "times": N, "match": "/cas/", "methods": ["GET"], "delay": 2.0,
                  "code": 500}
    POST /die    {"after": N}     exit (every socket closed) after N more requests
    GET  /log                      {"requests": [[method, path, status, {header: value}], ...],
                                    "faults": k}   (status null while being answered)
    POST /reset                    no fault, empty log

Fault modes, applied to the next ``times`` requests (``-1``: all) whose path contains ``match``
and whose method is in ``methods`` (default: any):

- ``refuse``: the proxy's listening socket is closed (connections refused) until ``/reset`` or
  another ``/fault``;
- ``status``: answer with status ``code`` (default 500) and a short body (the request body is
  read first); ``500`` is ``status`` with code 500;
- ``slow``: sleep ``delay`` seconds before forwarding (past the client's timeout);
- ``truncate``: forward the response headers (Content-Length intact), then half of the body, then
  close the connection;
- ``flip``: forward the response with one byte of the body (the middle one) inverted;
- ``reset``: close the connection without answering.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

CHUNK = 1 << 20
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
               "proxy-authorization", "proxy-authenticate"}


class State:
    """The armed fault and the request log, shared by the handler threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.mode: str | None = None
        self.times = 0
        self.match = ""
        self.methods: set[str] | None = None
        self.delay = 2.0
        self.code = 500
        self.die_after: int | None = None
        self.log: list[list] = []
        self.faults = 0

    def take(self, method: str, path: str) -> str | None:
        """The fault to apply to this request (consuming one of ``times``), or None."""
        with self.lock:
            if self.mode is None or self.times == 0 or self.mode == "refuse":
                return None
            if self.match not in path or (self.methods and method not in self.methods):
                return None
            if self.times > 0:
                self.times -= 1
            self.faults += 1
            return self.mode


STATE = State()
UPSTREAM = urlsplit("http://127.0.0.1:1")
DATA_SERVER: ThreadingHTTPServer | None = None
DATA_PORT = 0
DATA_LOCK = threading.Lock()
OPEN_CONNECTIONS: set[socket.socket] = set()


class ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        with DATA_LOCK:
            OPEN_CONNECTIONS.add(self.connection)

    def finish(self) -> None:
        with DATA_LOCK:
            OPEN_CONNECTIONS.discard(self.connection)
        super().finish()

    def log_message(self, format, *args):  # quiet
        pass

    def _read_body(self) -> bytes | None:
        length = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding"):
            return None
        return self.rfile.read(length) if length else b""

    def _plain(self, status: int, body: bytes = b"", close: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _forward(self, fault: str | None) -> int:
        length = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding"):
            self._plain(411, b"chunked bodies not supported by the test proxy\n", close=True)
            return 411
        conn = http.client.HTTPConnection(UPSTREAM.hostname, UPSTREAM.port, timeout=30)
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in HOP_HEADERS:
                    conn.putheader(name, value)
            conn.endheaders()
            left = length
            while left:
                chunk = self.rfile.read(min(CHUNK, left))
                if not chunk:
                    break
                conn.send(chunk)
                left -= len(chunk)
            resp = conn.getresponse()
            body_len = int(resp.getheader("Content-Length") or 0)
            self.send_response(resp.status, resp.reason)
            for name, value in resp.getheaders():
                if name.lower() not in HOP_HEADERS:
                    self.send_header(name, value)
            self.end_headers()
            if self.command == "HEAD":
                resp.read()
                return resp.status
            cut = body_len // 2 if fault == "truncate" else body_len
            flip_at = body_len // 2 if fault == "flip" and body_len else -1
            sent = 0
            while sent < cut:
                chunk = resp.read(min(CHUNK, cut - sent))
                if not chunk:
                    break
                if sent <= flip_at < sent + len(chunk):
                    b = bytearray(chunk)
                    b[flip_at - sent] ^= 0xFF
                    chunk = bytes(b)
                self.wfile.write(chunk)
                sent += len(chunk)
            if fault == "truncate":
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
            return resp.status
        finally:
            conn.close()

    def _handle(self) -> None:
        path = self.path
        fault = STATE.take(self.command, path)
        entry = [self.command, path, None, dict(self.headers.items())]
        with STATE.lock:  # logged on arrival: a client that got its answer finds its request here
            STATE.log.append(entry)
        if fault == "reset":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            status = 0
        elif fault in ("500", "status"):
            self._read_body()
            status = STATE.code if fault == "status" else 500
            self._plain(status, b"injected fault\n", close=True)
        else:
            if fault == "slow":
                time.sleep(STATE.delay)
            status = self._forward(fault)
        with STATE.lock:
            entry[2] = status
            if STATE.die_after is not None:
                STATE.die_after -= 1
                if STATE.die_after <= 0:
                    sys.stdout.flush()
                    os._exit(0)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _handle


class ControlHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        pass

    def _reply(self, obj) -> None:
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        with STATE.lock:
            self._reply({"requests": list(STATE.log), "faults": STATE.faults})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        args = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/reset":
            with STATE.lock:
                STATE.reset()
            start_data_server()
        elif self.path == "/fault":
            with STATE.lock:
                STATE.mode = args["mode"]
                STATE.times = int(args.get("times", -1))
                STATE.match = args.get("match", "")
                STATE.methods = set(args["methods"]) if args.get("methods") else None
                STATE.delay = float(args.get("delay", 2.0))
                STATE.code = int(args.get("code", 500))
            if STATE.mode == "refuse":
                stop_data_server()
            else:
                start_data_server()
        elif self.path == "/die":
            with STATE.lock:
                STATE.die_after = int(args["after"])
        else:
            self.send_error(404)
            return
        self._reply({"ok": True})


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def start_data_server() -> None:
    """(Re)open the forwarding listener on DATA_PORT (0 the first time: a free port)."""
    global DATA_SERVER, DATA_PORT
    with DATA_LOCK:
        if DATA_SERVER is not None:
            return
        DATA_SERVER = Server(("127.0.0.1", DATA_PORT), ProxyHandler)
        DATA_PORT = DATA_SERVER.server_address[1]
        threading.Thread(target=DATA_SERVER.serve_forever, args=(0.05,), daemon=True).start()


def stop_data_server() -> None:
    """Close the forwarding listener and every open connection: DATA_PORT refuses connections."""
    global DATA_SERVER
    with DATA_LOCK:
        server, DATA_SERVER = DATA_SERVER, None
        conns = list(OPEN_CONNECTIONS)
    if server is not None:
        server.shutdown()
        server.server_close()
    for conn in conns:
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def main(argv: list[str]) -> int:
    global UPSTREAM
    UPSTREAM = urlsplit(argv[0])
    start_data_server()
    control = Server(("127.0.0.1", 0), ControlHandler)
    print(DATA_PORT, control.server_address[1], flush=True)
    control.serve_forever(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
