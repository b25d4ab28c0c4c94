"""gameday.httpclient against a real HTTP/1.1 server on loopback."""

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gameday.errors import TargetUnavailable
from gameday.httpclient import HttpRequest, get_json, send, session


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.peers: list[int] = []  # the client port of each request
        self.drop_first = 0  # how many requests are answered by closing the connection

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, status: int, document: Any) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.server.peers.append(self.client_address[1])
        if self.server.drop_first > 0:
            self.server.drop_first -= 1
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if self.path == "/broken":
            self._answer(503, {"error": "shard 0 broken"})
        elif self.path == "/missing":
            self._answer(404, {"error": "no such thing"})
        else:
            self._answer(200, {"path": self.path})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self._answer(200, {"echo": json.loads(self.rfile.read(length))})


@pytest.fixture()
def server() -> Iterator[_Server]:
    served = _Server()
    thread = threading.Thread(target=served.serve_forever, daemon=True)
    thread.start()
    yield served
    served.shutdown()
    served.server_close()
    thread.join()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_send_reports_status_body_latency_and_errors(server: _Server) -> None:
    answer = send(HttpRequest(f"{server.url}/x"))
    assert (answer.status, answer.json(), answer.error, answer.ok) == (
        200, {"path": "/x"}, "", True)
    assert answer.latency_s > 0
    posted = send(HttpRequest(f"{server.url}/p", method="POST", body=b'{"a": 1}'))
    assert posted.json() == {"echo": {"a": 1}}
    broken = send(HttpRequest(f"{server.url}/broken"))
    assert (broken.status, broken.ok, broken.error) == (503, False, "answered 503: shard 0 broken")
    refused = send(HttpRequest(f"http://127.0.0.1:{_closed_port()}/"))
    assert refused.status is None
    assert refused.error == "failed: [Errno 111] Connection refused"


def test_a_request_without_an_answer_times_out() -> None:
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        answer = send(HttpRequest(f"http://127.0.0.1:{silent.getsockname()[1]}/",
                                  timeout_s=0.2))
    assert (answer.status, answer.error) == (None, "no answer within 0.2 s")


def test_a_thread_reuses_its_connection_and_threads_do_not_share_sessions(
        server: _Server) -> None:
    for _ in range(5):
        assert send(HttpRequest(f"{server.url}/again")).ok
    assert len(set(server.peers)) == 1  # five requests, one connection
    theirs: list[object] = []
    other = threading.Thread(target=lambda: theirs.append(session()))
    other.start()
    other.join()
    assert theirs[0] is not session()
    assert session() is session()


def test_get_json_retries_a_dropped_connection(server: _Server) -> None:
    server.drop_first = 2
    assert get_json(f"{server.url}/placement") == {"path": "/placement"}
    assert len(server.peers) == 3


def test_get_json_failures_are_one_line_target_unavailable(server: _Server) -> None:
    server.drop_first = 3
    with pytest.raises(TargetUnavailable, match=r"^cannot read .*/placement: failed: "):
        get_json(f"{server.url}/placement")
    assert len(server.peers) == 3  # three tries, then the last failure
    with pytest.raises(TargetUnavailable) as missing:
        get_json(f"{server.url}/missing")
    assert str(missing.value) == f"cannot read {server.url}/missing: answered 404: no such thing"
