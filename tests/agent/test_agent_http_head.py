"""The agent's reading of request heads (h11, gameday/agent/framing.py) and its own
writing of answer heads (gameday/agent/response_head.py), over a real socket with hand-written
bytes:
keep-alive as HTTP/1.x says, a head read the same whether it came in one piece or in
many, the exact status line and fields of answers, and a malformed head answered with a
one-line JSON error on a closed connection."""

import json
import pathlib
import re
import socket
import time
from collections.abc import Iterator
from typing import Any, BinaryIO

import pytest

from gameday.agent.framing import MAX_FIELDS, MAX_HEAD_BYTES
from gameday.agent.server import AgentServer
from tests.agent.agent_marker import MarkerBackend

TOKEN = "s3cret-token-0123456789"


@pytest.fixture
def agent(tmp_path: pathlib.Path) -> Iterator[AgentServer]:
    server = AgentServer(MarkerBackend(tmp_path / "markers"), token=TOKEN,
                         state_path=tmp_path / "agent.json", node="node-a").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def conn(agent: AgentServer) -> Iterator[socket.socket]:
    host, port = agent.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        yield sock


def read_reply(stream: BinaryIO) -> tuple[int, dict[str, str], dict[str, Any]]:
    """One reply: status, header fields (lower-case names), decoded JSON body."""
    status = int(stream.readline().split()[1])
    fields: dict[str, str] = {}
    while (line := stream.readline().decode("iso-8859-1").strip()):
        name, _, value = line.partition(":")
        fields[name.lower()] = value.strip()
    body = stream.read(int(fields.get("content-length", "0")))
    return status, fields, json.loads(body) if body else {}


def get(path: str, version: str = "HTTP/1.1", *extra: str) -> bytes:
    lines = [f"GET {path} {version}", "Host: agent", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("iso-8859-1")


def closed(stream: BinaryIO) -> bool:
    return stream.read() == b""


def send_in_pieces(conn: socket.socket, data: bytes, pieces: int = 3) -> None:
    """``data`` in ``pieces`` writes with pauses: the agent sees a head cut short in its
    buffer and reads it line by line (the path a head that came whole does not take)."""
    size = -(-len(data) // pieces)
    for start in range(0, len(data), size):
        conn.sendall(data[start:start + size])
        time.sleep(0.05)


def raw_head(stream: BinaryIO) -> list[bytes]:
    """The lines of one answer head as sent, with their CRLF, up to the empty line."""
    lines = [stream.readline()]
    while lines[-1] != b"\r\n":
        lines.append(stream.readline())
    return lines


DATE = re.compile(rb"Date: (Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|"
                  rb"Sep|Oct|Nov|Dec) \d{4} \d\d:\d\d:\d\d GMT\r\n")


def test_answers_carry_the_status_line_and_fields_in_the_stdlib_order(
        conn: socket.socket) -> None:
    stream = conn.makefile("rb")
    conn.sendall(get("/healthz") + get("/v1/faults") + b"DELETE /healthz HTTP/1.1\r\n"
                 b"Host: a\r\nContent-Length: 0\r\n\r\n"
                 + b"HEAD /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
    expected: list[tuple[bytes, list[bytes]]] = [
        (b"HTTP/1.1 200 OK\r\n", []),
        (b"HTTP/1.1 401 Unauthorized\r\n",
         [b'WWW-Authenticate: Bearer realm="gameday-agent"\r\n']),
        (b"HTTP/1.1 405 Method Not Allowed\r\n", [b"Allow: GET\r\n"]),
        (b"HTTP/1.1 501 Not Implemented\r\n", [b"Connection: close\r\n"]),
    ]
    for status_line, extra in expected:
        status, server, date, content_type, content_length, *rest = raw_head(stream)
        assert (status, server, content_type) == (
            status_line, b"Server: gameday-agent/1\r\n", b"Content-Type: application/json\r\n")
        assert DATE.fullmatch(date) and rest == [*extra, b"\r\n"]
        length = int(content_length.removeprefix(b"Content-Length: ").removesuffix(b"\r\n"))
        if status_line.startswith(b"HTTP/1.1 501"):
            assert closed(stream)  # the answer to HEAD has no body, as the stdlib's
        else:
            body = stream.read(length)  # one line of JSON
            assert body.endswith(b"}\n") and body.count(b"\n") == 1 and json.loads(body)


def revert_none(*tokens: str) -> bytes:
    """A batch revert of an unknown id with bare LF line ends, an ``Authorization`` field
    per token, and a body that holds what looks like the end of a head (JSON blanks)."""
    body = b'{"ids":\r\n\r\n["f-none"]}'
    fields = "".join(f"Authorization: Bearer {token}\n" for token in tokens)
    return (f"POST /v1/faults:batch-revert HTTP/1.1\nHost: agent\n{fields}"
            f"Content-Length: {len(body)}\n\n").encode() + body


@pytest.mark.parametrize("pieces", [1, 4])
def test_a_head_is_read_the_same_in_one_piece_or_many(conn: socket.socket,
                                                      pieces: int) -> None:
    stream = conn.makefile("rb")
    send_in_pieces(conn, revert_none(TOKEN), pieces)
    status, _, answer = read_reply(stream)
    assert status == 200 and answer["failed"][0]["id"] == "f-none"
    conn.sendall(get("/healthz") * 2)  # pipelined: both in one write
    assert read_reply(stream)[0] == read_reply(stream)[0] == 200
    send_in_pieces(conn, revert_none("wrong"), pieces)
    status, fields, _ = read_reply(stream)  # the body is left unread: the connection ends
    assert status == 401 and fields["connection"] == "close" and closed(stream)


def test_a_second_authorization_field_is_refused_whichever_comes_first(
        agent: AgentServer) -> None:
    host, port = agent.url.removeprefix("http://").rsplit(":", 1)
    for tokens in ((TOKEN, "wrong"), ("wrong", TOKEN)):
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            stream = sock.makefile("rb")
            sock.sendall(revert_none(*tokens))
            status, fields, answer = read_reply(stream)
            assert status == 400 and "more than one Authorization" in answer["error"]
            assert fields["connection"] == "close" and closed(stream)


@pytest.mark.parametrize(("head", "status", "names"), [
    (b"GET /healthz\r\n\r\n", 400, "bad request"),
    (b"GET /healthz HTTP/1.1 extra\r\n\r\n", 400, "bad request"),
    (b"GET /healthz HTTP/x.1\r\n\r\n", 400, "bad request"),
    (b"GET /healthz HTTP/2.0\r\n\r\n", 505, "not supported"),
    (b"GET /healthz HTTP/1.1\r\nHost: a\r\nno colon here\r\n\r\n", 400, "bad request"),
    (b"GET /healthz HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n", 400, "bad request"),
    (b"GET /healthz HTTP/1.1\r\nHost: a\r\n folded: x\r\n\r\n", 400, "bad request"),
    (b"GET /healthz HTTP/1.1\r\nHost: a\r\nbad\r\n" + b"X-A: 1\r\n" * MAX_FIELDS + b"\r\n", 400,
     "bad request"),  # the first fault in the head is the one answered
    (b"GET /healthz HTTP/1.1\r\nHost: a\r\n" + b"X-A: 1\r\n" * (MAX_FIELDS + 1) + b"\r\n", 431,
     "more than 100 header fields"),
    (b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-A: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n", 431,
     "bad request"),
    (b"BREW /healthz HTTP/1.1\r\nHost: a\r\n\r\n", 501, "Unsupported method"),
    (b"GET /healthz HTTP/1.1\r\n\r\n", 400, "Host"),  # HTTP/1.1 requires one
    (b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "multiple Host"),
    (b"GET /" + b"a" * MAX_HEAD_BYTES + b" HTTP/1.1\r\nHost: a\r\n\r\n", 431, "bad request"),
])
@pytest.mark.parametrize("pieces", [1, 2])
def test_a_malformed_head_is_a_one_line_json_error_and_closes(
        conn: socket.socket, head: bytes, status: int, names: str, pieces: int) -> None:
    stream = conn.makefile("rb")
    send_in_pieces(conn, head, pieces)
    got, fields, answer = read_reply(stream)
    assert got == status and fields["content-type"] == "application/json"
    assert names in answer["error"] and "\n" not in answer["error"]
    assert fields["connection"] == "close" and closed(stream)
