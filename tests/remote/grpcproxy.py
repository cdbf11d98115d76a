"""A fault-injecting gRPC proxy for the gRPC tier's tests, run as its own process on loopback.

Run: ``python grpcproxy.py UPSTREAM_HOST:PORT [--tls CERT KEY]``. It prints one line, ``PORT
CONTROL_PORT``, then serves until killed. Every call on PORT (any method: requests and answers are
passed on as bytes, with the caller's metadata and deadline) is forwarded to the upstream REAPI
server unless a fault is armed; with ``--tls`` PORT speaks TLS (grpcs://) with that certificate.
The control port takes JSON, as ``faultproxy.py``'s does::

    POST /fault  {"mode": M, "times": N, "match": "ByteStream/Read", "delay": 2.0,
                  "code": "UNAVAILABLE"}
    POST /die    {"after": N}     exit (every connection closed) when a call comes after N more
    GET  /log                      {"calls": [[method, {metadata key: value}, status], ...],
                                    "faults": k}   (status null while being answered)
    POST /reset                    no fault, empty log; listening again after "refuse"

Fault modes, applied to the next ``times`` calls (``-1``: all) whose method path contains
``match``:

- ``refuse``: the server is stopped: its listening socket and every connection closed
  (connections refused) until ``/reset`` or another ``/fault``;
- ``status``: answer with status ``code`` (a ``grpc.StatusCode`` name) without forwarding;
- ``slow``: sleep ``delay`` seconds before forwarding (past the client's deadline);
- ``truncate``: forward the first half of the answer (a stream: its first whole messages, up to
  half of its bytes), then end the call with ``UNAVAILABLE``, as a connection cut mid-answer
  does; a single answer: none of it;
- ``flip``: forward the answer with one byte inverted: the middle byte of the answer's bytes
  (a stream: of all its messages'), which for a blob's answer lies in the blob's data;
- ``flip_request``: the same, to the request (an upload) on its way to the server.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from concurrent import futures
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc

STREAM_ANSWERS = {"/google.bytestream.ByteStream/Read"}
STREAM_REQUESTS = {"/google.bytestream.ByteStream/Write"}
NOT_FORWARDED = ("grpc-", ":", "user-agent")


class State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.mode: str | None = None
        self.times = 0
        self.match = ""
        self.delay = 2.0
        self.code = "UNAVAILABLE"
        self.die_after: int | None = None
        self.log: list[list] = []
        self.faults = 0

    def take(self, method: str) -> str | None:
        with self.lock:
            if self.mode is None or self.times == 0 or self.mode == "refuse" or self.match not in method:
                return None
            if self.times > 0:
                self.times -= 1
            self.faults += 1
            return self.mode


STATE = State()
UPSTREAM: grpc.Channel | None = None
SERVER: grpc.Server | None = None
PORT = 0
TLS: tuple[bytes, bytes] | None = None
SERVER_LOCK = threading.Lock()


def flip_middle(data: bytes) -> bytes:
    if not data:
        return data
    b = bytearray(data)
    b[len(b) // 2] ^= 0xFF
    return bytes(b)


def flip_stream(messages: list[bytes]) -> list[bytes]:
    """The messages with the middle byte of their concatenated bytes inverted."""
    total = sum(len(m) for m in messages)
    at = total // 2
    out = []
    for m in messages:
        if 0 <= at < len(m):
            m = bytearray(m)
            m[at] ^= 0xFF
            m = bytes(m)
        at -= len(m)
        out.append(m)
    return out


class Call:
    """One call's bookkeeping: its log entry, its fault, the metadata passed on."""

    def __init__(self, method: str, context: grpc.ServicerContext) -> None:
        self.method = method
        self.context = context
        with STATE.lock:
            if STATE.die_after is not None and STATE.die_after <= 0:
                os._exit(0)  # N calls were answered: the server is gone, every connection with it
        metadata = list(context.invocation_metadata())
        self.entry = [method, dict(metadata), None]
        with STATE.lock:
            STATE.log.append(self.entry)
        self.forward = [(k, v) for k, v in metadata if not k.startswith(NOT_FORWARDED)]
        self.fault = STATE.take(method)
        if self.fault == "status":
            self.fail(getattr(grpc.StatusCode, STATE.code), "injected fault")
        if self.fault == "slow":
            time.sleep(STATE.delay)

    def timeout(self) -> float | None:
        left = self.context.time_remaining()
        return None if left is None or left > 1e6 else max(0.01, left)

    def fail(self, code: grpc.StatusCode, details: str):
        self.done(code.name)
        self.context.abort(code, details)

    def upstream_failed(self, exc: grpc.RpcError):
        self.fail(exc.code(), exc.details() or "")

    def done(self, status: str) -> None:
        with STATE.lock:
            self.entry[2] = status
            if STATE.die_after is not None:
                STATE.die_after -= 1


def unary(method: str, request: bytes, context: grpc.ServicerContext) -> bytes:
    call = Call(method, context)
    if call.fault == "flip_request":
        request = flip_middle(request)
    try:
        answer = UPSTREAM.unary_unary(method)(request, metadata=call.forward, timeout=call.timeout())
    except grpc.RpcError as exc:
        call.upstream_failed(exc)
    if call.fault == "truncate":
        call.fail(grpc.StatusCode.UNAVAILABLE, "connection cut mid-answer")
    if call.fault == "flip":
        answer = flip_middle(answer)
    call.done("OK")
    return answer


def answer_stream(method: str, request: bytes, context: grpc.ServicerContext):
    call = Call(method, context)
    try:
        messages = list(UPSTREAM.unary_stream(method)(request, metadata=call.forward, timeout=call.timeout()))
    except grpc.RpcError as exc:
        call.upstream_failed(exc)
    if call.fault == "flip":
        messages = flip_stream(messages)
    if call.fault == "truncate":  # whole messages (gRPC frames them), the first half of the bytes
        half, sent = sum(len(m) for m in messages) // 2, 0
        for m in messages:
            if sent and sent + len(m) > half:
                break
            yield m
            sent += len(m)
        call.fail(grpc.StatusCode.UNAVAILABLE, "connection cut mid-answer")
    call.done("OK")
    yield from messages


def request_stream(method: str, requests, context: grpc.ServicerContext) -> bytes:
    call = Call(method, context)
    messages = list(requests)
    if call.fault == "flip_request":
        messages = flip_stream(messages)
    try:
        answer = UPSTREAM.stream_unary(method)(iter(messages), metadata=call.forward, timeout=call.timeout())
    except grpc.RpcError as exc:
        call.upstream_failed(exc)
    if call.fault == "truncate":
        call.fail(grpc.StatusCode.UNAVAILABLE, "connection cut mid-answer")
    call.done("OK")
    return answer


class Forward(grpc.GenericRpcHandler):
    def service(self, details):
        method = details.method
        if method in STREAM_ANSWERS:
            return grpc.unary_stream_rpc_method_handler(partial(answer_stream, method))
        if method in STREAM_REQUESTS:
            return grpc.stream_unary_rpc_method_handler(partial(request_stream, method))
        return grpc.unary_unary_rpc_method_handler(partial(unary, method))


def start_server() -> None:
    """(Re)open the proxy on PORT (0 the first time: a free port)."""
    global SERVER, PORT
    with SERVER_LOCK:
        if SERVER is not None:
            return
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16),
                             options=[("grpc.so_reuseport", 1), ("grpc.max_receive_message_length", 16 << 20),
                                      ("grpc.max_send_message_length", 16 << 20)])
        server.add_generic_rpc_handlers((Forward(),))
        address = f"127.0.0.1:{PORT}"
        if TLS is not None:
            PORT = server.add_secure_port(address, grpc.ssl_server_credentials([(TLS[1], TLS[0])]))
        else:
            PORT = server.add_insecure_port(address)
        server.start()
        SERVER = server


def stop_server() -> None:
    global SERVER
    with SERVER_LOCK:
        server, SERVER = SERVER, None
    if server is not None:
        server.stop(0).wait()


class Control(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # quiet
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
            self._reply({"calls": list(STATE.log), "faults": STATE.faults})

    def do_POST(self) -> None:
        args = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path == "/reset":
            with STATE.lock:
                STATE.reset()
            start_server()
        elif self.path == "/fault":
            with STATE.lock:
                STATE.mode = args["mode"]
                STATE.times = int(args.get("times", -1))
                STATE.match = args.get("match", "")
                STATE.delay = float(args.get("delay", 2.0))
                STATE.code = args.get("code", "UNAVAILABLE")
            if STATE.mode == "refuse":
                stop_server()
            else:
                start_server()
        elif self.path == "/die":
            with STATE.lock:
                STATE.die_after = int(args["after"])
        else:
            self.send_error(404)
            return
        self._reply({"ok": True})


class ControlServer(ThreadingHTTPServer):
    daemon_threads = True


def main(argv: list[str]) -> int:
    global UPSTREAM, TLS
    UPSTREAM = grpc.insecure_channel(argv[0], options=[("grpc.max_receive_message_length", 16 << 20),
                                                       ("grpc.max_send_message_length", 16 << 20)])
    if len(argv) == 4 and argv[1] == "--tls":
        with open(argv[2], "rb") as cert, open(argv[3], "rb") as key:
            TLS = (cert.read(), key.read())
    start_server()
    control = ControlServer(("127.0.0.1", 0), Control)
    print(PORT, control.server_address[1], flush=True)
    control.serve_forever(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
