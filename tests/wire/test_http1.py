"""The agent client's HTTP/1.1 (gameday/wire/http1.py), differentially against h11's
client side: over random answers made of HTTP's pieces, each delivered in random
fragments, ours accepts only what h11 accepts and reads it the same (status and body),
and refuses beyond h11 only by the rules its module names. Requests that would split
are refused before anything is written. Framing over real sockets, TLS and a server
that closes idle connections: tests/engine/test_agent_client_http.py."""

import random
import socket
import threading

import h11
import pytest

from gameday.errors import AgentError
from gameday.wire.agent_client import AgentClient
from gameday.wire.http1 import Answer, Connection, MalformedAnswer, request_bytes
from tests.http_cases import http_case

PIECES = [b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2", b" ", b"200", b"204", b"304", b"404",
          b"100", b"OK", b"\r\n", b"\n", b"\r", b"Content-Length: 3", b"Content-Length: 03",
          b"Content-Length: +3", b"Content-Length: 3, 3", b"Content-Length: 3,4",
          b"Content-Length: 4", b"Transfer-Encoding: chunked", b"Transfer-Encoding: gzip",
          b"Connection: close", b"Connection: keep-alive", b"X-A:", b" folded", b"\t", b":",
          b"\x00", b"\xff", b"abc", b"3\r\nabc\r\n0\r\n\r\n", b"0;x=y\r\n", b"T: t\r\n",
          b"\r\n\r\n"]
#: What ours refuses beyond h11 (the module doc's list), by the words of its messages.
EXTRA = ("together with Transfer-Encoding", "header fields", "trailer fields", "CRLF",
         "a chunk line over", "is not 1.0 or 1.1",
         "folded")
BASE = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"


class Fragments:
    """A socket's ``recv`` that hands out ``data`` in pieces of random sizes, then the
    end of the connection (b"")."""

    def __init__(self, data: bytes, rng: random.Random) -> None:
        self.pieces: list[bytes] = []
        while data:
            cut = rng.randint(1, 9)
            self.pieces.append(data[:cut])
            data = data[cut:]

    def recv(self, _size: int) -> bytes:
        return self.pieces.pop(0) if self.pieces else b""

    def close(self) -> None:
        """Closed by the connection when the answer says so."""


def ours(data: bytes, rng: random.Random) -> Answer | Exception:
    conn = Connection("a", 80, timeout_s=1, max_body=1 << 20)
    conn._sock = Fragments(data, rng)  # type: ignore[assignment]
    try:
        return conn.read_answer()
    except (MalformedAnswer, ConnectionResetError) as exc:
        return exc


def theirs(data: bytes) -> tuple[int, bytes] | Exception:
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="GET", target="/", headers=[("Host", "a")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(data)
    conn.receive_data(b"")
    try:
        while isinstance(event := conn.next_event(), h11.InformationalResponse):
            pass
        if not isinstance(event, h11.Response):
            return ValueError(f"no answer: {event!r}")
        body = b""
        while isinstance(part := conn.next_event(), h11.Data):
            body += bytes(part.data)
        if not isinstance(part, h11.EndOfMessage):
            return ValueError(f"no end: {part!r}")
        return event.status_code, body
    except h11.RemoteProtocolError as exc:
        return exc


@pytest.mark.parametrize("seed", range(4))
def test_the_reader_agrees_with_h11_or_refuses_by_a_named_rule(seed: int) -> None:
    rng = random.Random(seed)
    accepted = 0
    for _ in range(2000):
        data = http_case(rng, BASE, PIECES, mutated=0.6, longest=16)
        mine, reference = ours(data, rng), theirs(data)
        if isinstance(reference, Exception):
            assert isinstance(mine, Exception), (data, mine)
        elif isinstance(mine, Exception):
            assert any(rule in str(mine) for rule in EXTRA), (data, mine, reference)
        else:
            accepted += 1
            assert (mine.status, mine.body) == reference, data
    assert accepted > 100  # the cases reach answers both accept, not only refusals


def test_an_answer_in_any_fragments_reads_the_same() -> None:
    rng = random.Random(7)
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"3;x=y\r\n{\"a\r\n4\r\n\":1}\r\n0\r\nTrailer: t\r\n\r\n")
    for _ in range(200):
        answer = ours(chunked, rng)
        assert isinstance(answer, Answer)
        assert (answer.status, answer.body, answer.keep_alive) == (200, b'{"a":1}', True)


@pytest.mark.parametrize(("method", "target", "fields"), [
    ("GET", "/v1/faults\r\nX-Injected: 1", {}),
    ("GET", "/a b", {}),
    ("GET", "", {}),
    ("GE T", "/", {}),
    ("GET", "/", {"Authorization": "Bearer t\r\nX-Injected: 1"}),
    ("GET", "/", {"Authorization": "Bearer t\nX: 1"}),
    ("GET", "/", {"Bad Name": "v"}),
    ("GET", "/", {"Authorization": "Bearer \u2603"}),
])
def test_a_request_that_would_split_is_refused(method: str, target: str,
                                               fields: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        request_bytes(method, target, "a:1", fields, None)


def test_a_request_is_written_whole_in_one_piece() -> None:
    data = request_bytes("POST", "/v1/faults:batch", "127.0.0.1:9", {"Prefer": "x"}, b"{}")
    assert data == (b"POST /v1/faults:batch HTTP/1.1\r\nHost: 127.0.0.1:9\r\nPrefer: x\r\n"
                    b"Content-Length: 2\r\n\r\n{}")


def test_a_token_that_would_split_a_request_is_refused_before_any_connection() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(AgentError, match="holds a character a request cannot carry"):
            AgentClient(url, "t\r\nX-Injected: 1")
        listener.settimeout(0.2)
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing connected


def test_bytes_past_the_answer_close_the_connection() -> None:
    """A server that sends more than its answer (an answer to a request not made) gets
    the connection closed: what follows is never read as the next answer."""
    left, right = socket.socketpair()
    with left, right:
        conn = Connection("a", 80, timeout_s=1, max_body=1024)
        conn._sock = left
        right.sendall(BASE + b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        threading.Timer(0.5, right.close).start()
        answer = conn.read_answer()
        assert (answer.status, answer.body, answer.keep_alive) == (200, b"abc", False)
        assert not conn.is_open
