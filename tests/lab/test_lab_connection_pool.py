"""The lab's keep-alive pool (router -> shards) after a quiet spell: the servers have
closed every idle connection, so a request must not be retried on another of them.
Real HTTP servers and sockets on loopback; the servers' idle timeout shortened."""

import threading
import time
from collections.abc import Iterator

import pytest

from gameday.lab import httpjson
from gameday.lab.httpjson import ConnectionPool, JsonServer, Request, Response, json_response


def _slow(request: Request) -> Response:
    time.sleep(0.1)  # so that concurrent requests each open a connection
    return json_response(200, {"ok": True})


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[JsonServer]:
    monkeypatch.setattr(httpjson._Handler, "timeout", 0.3)  # the server closes idle ones
    served = JsonServer({("POST", "/predict"): _slow})
    served.start()
    try:
        yield served
    finally:
        served.stop()


def _idle_connections(pool: ConnectionPool, count: int) -> None:
    threads = [threading.Thread(target=pool.post, args=("/predict", b"{}"))
               for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert pool._idle.qsize() == count


def test_every_idle_connection_closed_by_the_server_still_answers(
        server: JsonServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(httpjson, "POOL_IDLE_S", 3600.0)  # the pool still trusts them
    pool = ConnectionPool(server.url)
    _idle_connections(pool, 3)
    time.sleep(0.6)  # the server has closed all three
    assert pool.post("/predict", b"{}")[0] == 200
    assert pool.post("/predict", b"{}")[0] == 200
    pool.close()


def test_connections_idle_too_long_are_not_used(server: JsonServer,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(httpjson, "POOL_IDLE_S", 0.2)
    pool = ConnectionPool(server.url)
    _idle_connections(pool, 2)
    time.sleep(0.25)
    assert pool.post("/predict", b"{}")[0] == 200
    assert pool._idle.qsize() == 1  # the two old ones closed, the new one kept
    pool.close()
