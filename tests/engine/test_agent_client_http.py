"""The client's HTTP/1.1 (http.client): answers framed every way a server may frame
them and malformed ones, read from real sockets on loopback, and a kept-alive connection
that the server closed while it was idle."""

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gameday.errors import AgentError
from gameday.wire.agent_client import MAX_ANSWER_BYTES, AgentClient
from tests.loopback import serving_each


@contextlib.contextmanager
def first_request_server(answer: Callable[[bytes], bytes | None]) -> Iterator[str]:
    """A real TCP server on loopback that reads each connection's FIRST request, sends
    ``answer(request)`` (nothing for ``None``) and closes the connection without saying
    so (as an agent does with an idle keep-alive connection); yields its URL."""
    def serve(conn: socket.socket, stop: threading.Event) -> None:
        request = conn.recv(65536)
        raw = answer(request) if request else None  # empty: the client went away
        if raw is not None:
            conn.sendall(raw)
            conn.shutdown(socket.SHUT_RDWR)

    with serving_each(serve) as url:
        yield url


@pytest.fixture
def raw_server() -> Iterator[tuple[str, list[bytes]]]:
    """:func:`first_request_server` answering with the next of the raw answers put in its
    list (none left: the connection is closed unanswered)."""
    answers: list[bytes] = []
    with first_request_server(lambda _: answers.pop(0) if answers else b"") as url:
        yield url, answers


@pytest.mark.parametrize(("raw", "status", "body"), [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n{\"a\":1}", 200, {"a": 1}),
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
     b"3;x=y\r\n{\"a\r\n4\r\n\":1}\r\n0\r\nTrailer: t\r\n\r\n", 200, {"a": 1}),
    (b"HTTP/1.0 200 OK\r\n\r\n{\"until\": \"close\"}", 200, {"until": "close"}),
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nConnection: close\r\n"
     b"Content-Length: 19\r\n\r\n{\"error\":\"no such\"}", 404, None),
])
def test_answers_framed_by_length_chunks_or_close(
        raw_server: tuple[str, list[bytes]], raw: bytes, status: int,
        body: dict[str, Any] | None) -> None:
    url, answers = raw_server
    answers.append(raw)
    with AgentClient(url, "token", timeout_s=2) as client:
        if body is not None:
            assert client._call("GET", "/healthz") == body
        else:
            with pytest.raises(AgentError, match="-> 404: no such") as caught:
                client._call("GET", "/healthz")
            assert caught.value.status == status


@pytest.mark.parametrize("raw", [
    b"SMTP ready\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2",
    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (MAX_ANSWER_BYTES + 1),
])
def test_malformed_answers_are_refused(raw_server: tuple[str, list[bytes]],
                                       raw: bytes) -> None:
    url, answers = raw_server
    answers.append(raw)
    with AgentClient(url, "token", timeout_s=2) as client, \
            pytest.raises(AgentError, match="malformed answer") as caught:
        client.health()
    assert caught.value.status is None


def test_a_connection_closed_before_any_answer_is_a_failure_without_status(
        raw_server: tuple[str, list[bytes]]) -> None:
    url, _ = raw_server  # no answers: each connection is closed unanswered
    with AgentClient(url, "token", timeout_s=2) as client, \
            pytest.raises(AgentError, match="connection failed") as caught:
        client.health()
    assert caught.value.status is None


@pytest.fixture
def one_shot_server() -> Iterator[tuple[str, list[bytes]]]:
    """:func:`first_request_server` answering ``{"ok": true, "n": <requests seen>}``."""
    seen: list[bytes] = []

    def answer(request: bytes) -> bytes:
        seen.append(request)
        body = json.dumps({"ok": True, "n": len(seen)}).encode()
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    with first_request_server(answer) as url:
        yield url, seen


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


@pytest.mark.parametrize("every_s", [0.02, 0.1, 0.3])
def test_an_answer_trickled_byte_by_byte_is_cut_off_at_the_clients_timeout(
        every_s: float) -> None:
    """A real server that answers one byte every ``every_s`` (each read under the
    timeout, the whole answer never done): the client gives up at its timeout for the
    whole answer, not per read, and says so without a status."""
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n{\"a\":1}"

    def serve(conn: socket.socket, stop: threading.Event) -> None:
        conn.recv(65536)
        for byte in answer * 20:
            if stop.wait(every_s):
                break
            conn.sendall(bytes([byte]))

    with serving_each(serve) as url:
        client = AgentClient(url, "token", timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(AgentError, match=r"no answer within 0\.5s") as caught:
            client.health()
        assert caught.value.status is None
        assert time.monotonic() - started < 0.5 + every_s + 0.4
        client.close()


def test_endless_informational_answers_are_refused(raw_server: tuple[str, list[bytes]]
                                                   ) -> None:
    url, answers = raw_server
    answers.append(b"HTTP/1.1 100 Continue\r\n\r\n" * 50
                   + b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
    with AgentClient(url, "token", timeout_s=2) as client, \
            pytest.raises(AgentError, match=r"malformed answer.*informational") as caught:
        client.health()
    assert caught.value.status is None
