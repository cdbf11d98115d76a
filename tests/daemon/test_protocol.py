"""The warm worker server's wire format and place (:mod:`ptebuild.daemon.protocol`): every message
framed by its length and read back whole however the stream is cut, anything else refused with a
:class:`~ptebuild.daemon.protocol.ProtocolError` that says what came; the socket's folder and name
(one per toolchain), reached however long its path; a greeting that refuses another protocol or
toolchain.

Real Unix sockets in ``tmp_path``; the peer that answers a greeting is a thread of the test (the
real server's answers: ``tests/daemon/test_server.py``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import stat
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ptebuild.daemon import protocol
from ptebuild.daemon.protocol import HEADER, MAX_MESSAGE, ProtocolError, Reader

# -- framing ------------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
MESSAGES = st.builds(lambda op, rest: {**rest, "op": op}, st.text(min_size=1, max_size=10),
                     st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=4))


@given(messages=st.lists(MESSAGES, max_size=5), cuts=st.lists(st.integers(0, 1 << 12), max_size=8))
def test_messages_come_back_whole_however_the_stream_is_cut(messages, cuts):
    stream = b"".join(protocol.encode(m) for m in messages)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    reader = Reader()
    got = []
    for start, end in itertools.pairwise(points):
        got += reader.feed(stream[start:end])
    assert got == messages
    assert reader.feed(b"") == []  # nothing left over


def test_a_frame_is_its_length_big_endian_then_compact_json():
    frame = protocol.encode({"op": "status"})
    assert frame == b"\x00\x00\x00\x0f" + b'{"op":"status"}'
    assert HEADER.size == 4


def test_a_message_fed_byte_by_byte_comes_out_once_complete():
    frame = protocol.encode({"op": "progress", "text": "lowering ü"})
    reader = Reader()
    for i, byte in enumerate(frame[:-1]):
        assert reader.feed(bytes([byte])) == [], i
    assert reader.feed(frame[-1:]) == [{"op": "progress", "text": "lowering ü"}]


def framed(body: bytes) -> bytes:
    return HEADER.pack(len(body)) + body


@pytest.mark.parametrize(("data", "expected"), [
    (framed(b"{not json"), "a message is not JSON: "),
    (framed(b"\xff\xfe"), "a message is not JSON: "),
    (framed(b"[1, 2]"), "a message is not an object with an 'op'"),
    (framed(b'{"task_id": "a"}'), "a message is not an object with an 'op'"),
    (framed(b'{"op": 3}'), "a message is not an object with an 'op'"),
    (HEADER.pack(MAX_MESSAGE + 1), f"a message of {MAX_MESSAGE + 1} bytes announced, over the limit of {MAX_MESSAGE}"),
], ids=["not-json", "not-utf8", "a-list", "no-op", "op-not-a-string", "too-long"])
def test_what_is_not_a_message_is_refused(data, expected):
    with pytest.raises(ProtocolError) as info:
        Reader().feed(protocol.encode({"op": "hello"}) + data)
    assert str(info.value).startswith(expected), str(info.value)


def test_a_message_over_the_limit_is_not_sent():
    with pytest.raises(ProtocolError, match=rf"^message of {MAX_MESSAGE + 17} bytes is over the limit of {MAX_MESSAGE}$"):
        protocol.encode({"op": "x", "t": "a" * MAX_MESSAGE})  # 17 bytes of JSON around the text


def test_a_protocol_error_is_an_os_error():
    """A client treats a peer that speaks nonsense as one that hung up (``except OSError``)."""
    assert issubclass(ProtocolError, OSError)


# -- request over a real socket -----------------------------------------------------------------


def test_request_returns_the_first_message_back():
    ours, theirs = socket.socketpair()
    with ours, theirs:
        # The answer arrives in two pieces, with a second message behind it.
        answer = protocol.encode({"op": "status", "pid": 7}) + protocol.encode({"op": "later"})

        def peer():
            Reader().feed(theirs.recv(1 << 16))
            theirs.sendall(answer[:3])
            theirs.sendall(answer[3:])

        thread = threading.Thread(target=peer)
        thread.start()
        assert protocol.request(ours, {"op": "status"}, timeout=5) == {"op": "status", "pid": 7}
        thread.join()


def test_request_to_a_peer_that_hangs_up_raises():
    ours, theirs = socket.socketpair()

    def peer():
        with theirs:
            theirs.recv(1 << 16)  # reads the request, answers nothing

    thread = threading.Thread(target=peer)
    thread.start()
    with ours, pytest.raises(ProtocolError, match="^the worker server hung up$"):
        protocol.request(ours, {"op": "status"}, timeout=5)
    thread.join()


def test_request_to_a_peer_that_never_answers_times_out():
    ours, theirs = socket.socketpair()
    with ours, theirs:
        with pytest.raises(TimeoutError):
            protocol.request(ours, {"op": "status"}, timeout=0.2)
        assert Reader().feed(theirs.recv(1 << 16)) == [{"op": "status"}]  # it was sent


# -- place ---------------------------------------------------------------------------------------


def test_the_workers_folder_is_the_caches_unless_one_is_shared(tmp_path, monkeypatch):
    monkeypatch.delenv(protocol.WORKERS_DIR_ENV, raising=False)
    assert protocol.workers_dir(tmp_path / "cache") == tmp_path / "cache" / "workers"
    monkeypatch.setenv(protocol.WORKERS_DIR_ENV, str(tmp_path / "shared"))
    assert protocol.workers_dir(tmp_path / "cache") == tmp_path / "shared"
    assert protocol.workers_dir(tmp_path / "other") == tmp_path / "shared"


def test_the_socket_is_named_after_the_toolchain_with_its_files_beside_it(tmp_path, monkeypatch):
    monkeypatch.delenv(protocol.WORKERS_DIR_ENV, raising=False)
    toolchain = protocol.toolchain_id()
    assert len(toolchain) == 20 and int(toolchain, 16) >= 0
    assert protocol.toolchain_id() == toolchain  # once per process
    path = protocol.socket_path(tmp_path)
    assert path == tmp_path / "workers" / f"{toolchain}.sock"
    assert protocol.socket_path(tmp_path, "f" * 20) == tmp_path / "workers" / f"{'f' * 20}.sock"
    assert [protocol.sibling(path, s).name for s in (".log", ".pid", ".lock")] == [
        f"{toolchain}.log", f"{toolchain}.pid", f"{toolchain}.lock"]


def test_the_toolchain_id_covers_the_python_path(monkeypatch, tmp_path):
    """Another ``PYTHONPATH`` imports other code: another server."""
    monkeypatch.setattr(protocol, "_toolchain", None)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    plain = protocol.toolchain_id()
    monkeypatch.setattr(protocol, "_toolchain", None)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert protocol.toolchain_id() != plain


@pytest.mark.parametrize("depth", [0, 6], ids=["short", "over-100-bytes"])
def test_a_listening_socket_is_private_and_reached_however_long_its_path(tmp_path, depth):
    folder = tmp_path.joinpath(*["a-rather-long-folder-name"] * depth)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{'0' * 20}.sock"
    assert (len(os.fsencode(str(path))) > 107) == (depth > 0)  # longer than a Unix socket address holds
    path.write_text("a stale socket's file")
    descriptors = len(os.listdir("/proc/self/fd"))
    with contextlib.closing(protocol.listen(path)) as listener:
        assert stat.S_ISSOCK(path.stat().st_mode) and stat.S_IMODE(path.stat().st_mode) == 0o600
        with protocol.connect(path) as client:
            server, _ = listener.accept()
            with server:
                protocol.send(client, {"op": "hello"})
                assert Reader().feed(server.recv(1 << 16)) == [{"op": "hello"}]
    assert len(os.listdir("/proc/self/fd")) == descriptors, "a descriptor was left open"


def test_connecting_where_nobody_listens_raises_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        protocol.connect(tmp_path / "none.sock")
    with contextlib.closing(protocol.listen(tmp_path / "gone.sock")):
        pass  # closed: the file stays, nobody listens
    with pytest.raises(ConnectionRefusedError):
        protocol.connect(tmp_path / "gone.sock")


# -- the greeting -------------------------------------------------------------------------------


def answering(answer: dict) -> tuple[socket.socket, list[dict], threading.Thread]:
    """A socket whose peer (a thread) notes the first message and answers ``answer``."""
    ours, theirs = socket.socketpair()
    seen: list[dict] = []

    def peer():
        with theirs:
            seen.extend(Reader().feed(theirs.recv(1 << 16)))
            theirs.sendall(protocol.encode(answer))

    thread = threading.Thread(target=peer)
    thread.start()
    return ours, seen, thread


def test_hello_says_who_is_asking_and_takes_a_hello_of_this_toolchain():
    answer = {"op": "hello", "protocol": protocol.PROTOCOL, "toolchain": protocol.toolchain_id(), "pid": 12}
    sock, seen, thread = answering(answer)
    with sock:
        assert protocol.hello(sock, timeout=5) == answer
    thread.join()
    assert seen == [{"op": "hello", "protocol": protocol.PROTOCOL, "toolchain": protocol.toolchain_id(), "pid": os.getpid()}]


@pytest.mark.parametrize("change", [
    {"op": "status"},
    {"protocol": protocol.PROTOCOL - 1},
    {"toolchain": "0" * 20},
], ids=["not-a-hello", "another-protocol", "another-toolchain"])
def test_hello_refuses_another_protocol_or_toolchain(change):
    answer = {"op": "hello", "protocol": protocol.PROTOCOL, "toolchain": protocol.toolchain_id(), "pid": 12, **change}
    sock, _, thread = answering(answer)
    with sock, pytest.raises(ProtocolError) as info:
        protocol.hello(sock, timeout=5)
    thread.join()
    assert str(info.value) == f"the worker server answered {answer!r}, not a hello of this toolchain"
