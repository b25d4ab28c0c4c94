"""The agent's own reading of request heads (gameday/agent/httphead.py), over a real
socket with hand-written bytes: keep-alive as HTTP/1.x says, and a malformed head
answered with a one-line JSON error on a closed connection."""

import json
import pathlib
import socket
from collections.abc import Iterator
from typing import Any, BinaryIO

import pytest
from agent_marker import MarkerBackend

from gameday.agent.httphead import MAX_FIELDS, MAX_LINE_BYTES
from gameday.agent.server import AgentServer

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


def test_http_1_1_keeps_the_connection_until_asked_to_close(conn: socket.socket) -> None:
    stream = conn.makefile("rb")
    conn.sendall(get("/v1/inventory", "HTTP/1.1", f"authorization: bearer {TOKEN}"))
    status, fields, inventory = read_reply(stream)  # field names are case-insensitive
    assert status == 200 and inventory["node"] == "node-a" and "connection" not in fields
    conn.sendall(get("/healthz", "HTTP/1.1", "Connection: close"))
    status, fields, _ = read_reply(stream)
    assert status == 200 and fields["connection"] == "close" and closed(stream)


def test_http_1_0_closes_unless_asked_to_keep_alive(conn: socket.socket) -> None:
    stream = conn.makefile("rb")
    conn.sendall(get("/healthz", "HTTP/1.0", "Connection: keep-alive"))
    assert read_reply(stream)[0] == 200
    conn.sendall(get("/healthz", "HTTP/1.0"))
    status, fields, _ = read_reply(stream)
    assert status == 200 and fields["connection"] == "close" and closed(stream)


def test_expect_100_continue_is_answered_before_the_body(conn: socket.socket) -> None:
    stream = conn.makefile("rb")
    body = b'{"ids": ["f-none"]}'
    conn.sendall(b"POST /v1/faults:batch-revert HTTP/1.1\r\nHost: agent\r\n"
                 b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                 b"Content-Type: application/json\r\nExpect: 100-continue\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    assert stream.readline().split()[1] == b"100"
    assert stream.readline() == b"\r\n"
    conn.sendall(body)
    status, _, answer = read_reply(stream)
    assert status == 200 and answer["faults"] == [] and answer["failed"][0]["status"] == 404


@pytest.mark.parametrize(("head", "status", "names"), [
    (b"GET /healthz\r\n\r\n", 400, "bad request line"),
    (b"GET /healthz HTTP/1.1 extra\r\n\r\n", 400, "bad request line"),
    (b"GET /healthz HTTP/x.1\r\n\r\n", 400, "bad HTTP version"),
    (b"GET /healthz HTTP/2.0\r\n\r\n", 505, "not supported"),
    (b"GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n", 400, "bad header line"),
    (b"GET /healthz HTTP/1.1\r\nBad Name: x\r\n\r\n", 400, "bad header line"),
    (b"GET /healthz HTTP/1.1\r\nHost: a\r\n folded: x\r\n\r\n", 400, "bad header line"),
    (b"GET /healthz HTTP/1.1\r\n" + b"X-A: 1\r\n" * (MAX_FIELDS + 1) + b"\r\n", 431,
     "more than 100 header fields"),
    (b"GET /healthz HTTP/1.1\r\nX-A: " + b"a" * MAX_LINE_BYTES + b"\r\n\r\n", 431,
     "over 65536 bytes"),
    (b"BREW /healthz HTTP/1.1\r\nHost: a\r\n\r\n", 501, "Unsupported method"),
    (b"GET /" + b"a" * MAX_LINE_BYTES + b" HTTP/1.1\r\n\r\n", 414, "URI Too Long"),
])
def test_a_malformed_head_is_a_one_line_json_error_and_closes(
        conn: socket.socket, head: bytes, status: int, names: str) -> None:
    stream = conn.makefile("rb")
    conn.sendall(head)
    got, fields, answer = read_reply(stream)
    assert got == status and fields["content-type"] == "application/json"
    assert names in answer["error"] and "\n" not in answer["error"]
    assert fields["connection"] == "close" and closed(stream)
