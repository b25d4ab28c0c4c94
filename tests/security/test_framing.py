"""HTTP framing and deadlines (issue 25, item 6): a smuggling corpus against a live agent
over mutual TLS (each refused, the connection closed, the smuggled request never
answered), silent connections closed at the request deadline (TLS and plaintext), and a
differential fuzz of :class:`gameday.agent.framing.RequestReader` against h11's own
parser: ours accepts only what h11 accepts, reads it the same, and refuses more only
for the rules the module names."""

import random
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import h11
import pytest

from gameday.agent.framing import FramingError, RequestReader
from gameday.agent.server import AgentServer
from tests.agent.agent_marker import MarkerBackend
from tests.http_cases import http_case
from tests.security.conftest import TOKEN, LiveAgent

SMUGGLED = (b"GET /v1/inventory HTTP/1.1\r\nHost: a\r\nConnection: close\r\n"
            b"Authorization: Bearer " + TOKEN.encode() + b"\r\n\r\n")
AUTH = b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
BODY = b'{"ids":[]}'


def framed(*fields: bytes, body: bytes = BODY) -> bytes:
    return (b"POST /v1/faults:batch-revert HTTP/1.1\r\nHost: a\r\n" + AUTH
            + b"".join(fields) + b"\r\n" + body + SMUGGLED)


CORPUS = {
    "two differing lengths": framed(b"Content-Length: 10\r\n", b"Content-Length: 0\r\n"),
    "two lengths in one field": framed(b"Content-Length: 10, 0\r\n"),
    "a signed length": framed(b"Content-Length: +10\r\n"),
    "an underscored length": framed(b"Content-Length: 1_0\r\n"),
    "a hex length": framed(b"Content-Length: 0xa\r\n"),
    "a negative length": framed(b"Content-Length: -1\r\n"),
    "a non-ASCII digit": framed("Content-Length: \uff110\r\n".encode()),
    "length and chunked": framed(b"Content-Length: 10\r\n", b"Transfer-Encoding: chunked\r\n"),
    "chunked then length": framed(b"Transfer-Encoding: chunked\r\n", b"Content-Length: 10\r\n"),
    "chunked alone": framed(b"Transfer-Encoding: chunked\r\n", body=b"a\r\n" + BODY
                            + b"\r\n0\r\n\r\n"),
    "an unknown coding": framed(b"Transfer-Encoding: gzip, chunked\r\n"),
    "a blank before the colon": framed(b"Content-Length : 10\r\n"),
    "a folded length": framed(b"Content-Length: 10\r\n", b"X-A: 1\r\n 0\r\n"),
    "a second Authorization": framed(b"Authorization: Bearer other\r\n",
                                     b"Content-Length: 10\r\n"),
    "a bare CR": framed(b"Content-Length: 10\rX-A: 1\r\n"),
    "HTTP/2 in a 1.1 line": b"POST / HTTP/2.0\r\nHost: a\r\n\r\n" + SMUGGLED,
}


def exchange(agent: LiveAgent, data: bytes) -> bytes:
    with agent.tls_socket() as sock:
        sock.sendall(data)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except (ConnectionError, TimeoutError):
            pass
        return b"".join(chunks)


def test_the_smuggling_corpus_is_refused_and_nothing_smuggled_is_answered(
        agent_with: Callable[..., LiveAgent]) -> None:
    agent = agent_with({"kinds": ["process.pause"]})
    # framed right, both are answered: the batch (400: no ids) and the next request
    assert exchange(agent, framed(b"Content-Length: 10\r\n")).count(b"HTTP/1.1 ") == 2
    for name, data in CORPUS.items():
        answer = exchange(agent, data)
        statuses = [line.split(b" ")[1] for line in answer.split(b"\r\n")
                    if line.startswith(b"HTTP/1.1 ")]
        assert len(statuses) == 1 and statuses[0] in (b"400", b"411", b"431", b"501",
                                                      b"505"), (name, answer[:300])
        assert b'"links"' not in answer and b"Connection: close" in answer, name


def test_a_silent_tls_connection_is_closed_at_the_deadline(
        agent_with: Callable[..., LiveAgent]) -> None:
    agent = agent_with({"kinds": ["process.pause"]}, "--request-deadline", "1")
    raw = socket.create_connection(("127.0.0.1", agent.port), timeout=10)  # no handshake
    started = time.monotonic()
    assert raw.recv(100) == b""
    assert time.monotonic() - started < 4
    raw.close()
    with agent.tls_socket() as sock:  # a handshake, then nothing
        started = time.monotonic()
        assert sock.recv(100) == b""
        assert time.monotonic() - started < 4


@pytest.fixture
def plain_agent(tmp_path: Path) -> Iterator[AgentServer]:
    server = AgentServer(MarkerBackend(tmp_path / "m"), token=TOKEN, node="n",
                         state_path=tmp_path / "s.json", request_deadline_s=0.5).start()
    yield server
    server.stop()


def test_a_silent_plaintext_connection_is_closed_at_the_deadline(
        plain_agent: AgentServer) -> None:
    port = int(plain_agent.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        started = time.monotonic()
        assert sock.recv(100) == b""
        assert time.monotonic() - started < 3


# -- differential ------------------------------------------------------------------------

PIECES = [b"GET", b"POST", b" ", b"/v1/faults", b"HTTP/1.1", b"HTTP/1.0", b"\r\n", b"\n",
          b"Host: a", b"Content-Length: 3", b"Content-Length: +3", b"Content-Length: 03",
          b"Content-Length: 3, 3", b"Content-Length: 4", b"Transfer-Encoding: chunked",
          b"Authorization: Bearer x", b"X-A:", b" folded", b"\t", b":", b"\r", b"\x00",
          b"abc", b"\xff", b"Connection: close", b"Expect: 100-continue", b"\r\n\r\n"]
#: What RequestReader refuses beyond h11 (the module doc's list).
EXTRA = ("together with Transfer-Encoding", "not chunked", "more than one", "folded",
         "not supported", "header fields", "a head over")


def ours(data: bytes) -> tuple[str, str, dict[str, str], bytes] | FramingError:
    chunks = [data[i:i + 7] for i in range(0, len(data), 7)] + [b""]
    reader = RequestReader(lambda _: chunks.pop(0) if chunks else b"")
    try:
        head = reader.head()
        if head is None:
            return FramingError(0, "closed")
        return head.method, head.target, head.fields, reader.body(1 << 20)
    except FramingError as exc:
        return exc


def theirs(data: bytes) -> tuple[str, str, dict[str, str], bytes] | Exception:
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    conn.receive_data(b"")
    try:
        event = conn.next_event()
        if not isinstance(event, h11.Request):
            return ValueError("no request")
        fields: dict[str, str] = {}
        for name, value in event.headers.raw_items():
            fields.setdefault(name.lower().decode("latin-1"), value.decode("latin-1"))
        body = b""
        while isinstance(event := conn.next_event(), h11.Data):
            body += bytes(event.data)
        if not isinstance(event, h11.EndOfMessage):
            return ValueError("no end")
        return event_method(data), "", fields, body
    except h11.RemoteProtocolError as exc:
        return exc


def event_method(data: bytes) -> str:
    return data.split(b" ", 1)[0].decode("latin-1")


@pytest.mark.parametrize("seed", range(4))
def test_the_reader_agrees_with_h11_or_refuses_by_a_named_rule(seed: int) -> None:
    rng = random.Random(seed)
    base = b"POST /v1/faults HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc"
    for _ in range(1500):
        case = http_case(rng, base, PIECES)
        mine, reference = ours(case), theirs(case)
        if isinstance(reference, Exception):
            assert isinstance(mine, FramingError), (case, mine)
        elif isinstance(mine, FramingError):
            assert any(rule in mine.message for rule in EXTRA), (case, mine.message)
        else:
            method, _, fields, body = reference
            assert (mine[0], mine[2], mine[3]) == (method, fields, body), case
