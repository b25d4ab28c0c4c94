"""The client's HTTP/1.1: answers framed every way a server may frame them, read from
real sockets, and a kept-alive connection that the server closed while it was idle."""

import contextlib
import io
import json
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gameday.engine.agent_client import AgentClient
from gameday.engine.agent_wire import MalformedAnswer, PeerClosed, read_answer, request_bytes
from gameday.errors import AgentError


def answer(raw: bytes) -> tuple[int, bytes, bool]:
    got = read_answer(io.BufferedReader(io.BytesIO(raw)))
    return got.status, got.body, got.will_close


def test_request_goes_out_whole() -> None:
    data = request_bytes("POST", "h:1", "/v1/x", {"Accept": "application/json"}, b'{"a":1}')
    assert data == (b"POST /v1/x HTTP/1.1\r\nHost: h:1\r\nAccept: application/json\r\n"
                    b"Content-Length: 7\r\n\r\n{\"a\":1}")


def test_answers_framed_by_length_chunks_or_close() -> None:
    assert answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}") == (200, b"{}", False)
    assert answer(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                  b"3;x=y\r\n{\"a\r\n4\r\n\":1}\r\n0\r\nTrailer: t\r\n\r\n") == \
        (200, b'{"a":1}', False)
    assert answer(b"HTTP/1.0 200 OK\r\n\r\n{\"until\": \"close\"}") == \
        (200, b'{"until": "close"}', True)
    assert answer(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\n"
                  b"Connection: close\r\nContent-Length: 0\r\n\r\n") == (404, b"", True)
    assert answer(b"HTTP/1.0 204 No Content\r\nConnection: keep-alive\r\n\r\n") == \
        (204, b"", False)


@pytest.mark.parametrize("raw", [
    b"SMTP ready\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort",
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2",
])
def test_malformed_answers_are_refused(raw: bytes) -> None:
    with pytest.raises(MalformedAnswer):
        answer(raw)


def test_nothing_at_all_means_the_peer_closed() -> None:
    with pytest.raises(PeerClosed):
        answer(b"")


@pytest.fixture
def one_shot_server() -> Iterator[tuple[str, list[bytes]]]:
    """A real HTTP server on loopback that answers each connection's FIRST request,
    then closes it (as an agent does with an idle keep-alive connection)."""
    seen: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                request = conn.recv(65536)
                if not request:
                    continue  # the client went away first
                seen.append(request)
                body = json.dumps({"ok": True, "n": len(seen)}).encode()
                with contextlib.suppress(OSError):
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
                                 % (len(body), body))
                    conn.shutdown(socket.SHUT_RDWR)  # no "Connection: close": it just goes

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", seen
    finally:
        stop.set()
        thread.join()
        listener.close()


def test_a_request_on_a_connection_the_server_closed_is_sent_again(
        one_shot_server: tuple[str, list[bytes]]) -> None:
    url, seen = one_shot_server
    client = AgentClient(url, "token", timeout_s=2)
    assert client.health() == {"ok": True, "n": 1}
    assert client.health() == {"ok": True, "n": 2}  # the first connection was gone
    assert len(seen) == 2 and all(r.startswith(b"GET /healthz HTTP/1.1\r\n") for r in seen)
    assert b"Authorization: Bearer token\r\n" in seen[0]
    client.close()


def test_split_exchanges_on_many_connections_from_one_thread(
        one_shot_server: tuple[str, list[bytes]]) -> None:
    url, _ = one_shot_server
    clients = [AgentClient(url, "token", timeout_s=2) for _ in range(5)]
    exchanges = [c._start("GET", "/healthz", None, _plain) for c in clients]
    assert all(e.state == "sent" and e.fileno() >= 0 for e in exchanges)
    assert sorted(e.result()["n"] for e in exchanges) == [1, 2, 3, 4, 5]
    assert [e.result()["n"] for e in exchanges] == [e.result()["n"] for e in exchanges]
    for client in clients:
        client.close()


def test_a_cancelled_exchange_raises_its_reason_and_frees_the_client(
        one_shot_server: tuple[str, list[bytes]]) -> None:
    url, _ = one_shot_server
    client = AgentClient(url, "token", timeout_s=2)
    exchange = client._start("GET", "/healthz", None, _plain)
    exchange.cancel("no answer within the client's timeout")
    with pytest.raises(AgentError, match="no answer within the client's timeout") as caught:
        exchange.result()
    assert caught.value.status is None
    assert client.health()["ok"] is True  # the lock was given back, on a new connection


def _plain(answer: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    return answer()
