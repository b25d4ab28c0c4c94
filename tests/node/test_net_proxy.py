"""service.latency / service.timeout on a host: a real TCP proxy put in front of a real
HTTP server's loopback port by a real nftables/iptables redirect; a real client that
knows nothing of the proxy sees the latency and the stall."""

import contextlib
import http.client
import http.server
import threading
import time
from collections.abc import Iterator

import pytest

from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.node.host.proxy import ServiceProxyFault
from tests.node.net_support import PREFIX, leftovers, sh

pytestmark = pytest.mark.skipif(
    ServiceProxyFault("service.latency").unavailable() is not None,
    reason=str(ServiceProxyFault("service.latency").unavailable()))


class _Hello(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # connections kept alive, as a real server keeps them

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def service() -> Iterator[int]:
    assert leftovers() == []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()
    assert leftovers() == []


def _get(port: int, timeout_s: float = 5.0) -> tuple[str, float]:
    """One request on a new connection: the body (or the error) and the time taken."""
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("GET", "/")
        answer = conn.getresponse().read().decode()
    except (OSError, http.client.HTTPException) as exc:
        answer = type(exc).__name__
    finally:
        conn.close()
    return answer, time.monotonic() - started


def test_latency_is_added_in_front_of_the_port_and_removed_on_revert(service: int) -> None:
    assert _get(service)[0] == "hello"
    fault = ServiceProxyFault("service.latency", prefix=PREFIX)
    request = FaultRequest("service.latency", {"port": service}, {"delay_ms": 300})
    details = fault.apply("f-lat-1", request)
    try:
        assert details["proxy_port"] != service
        answers = [_get(service) for _ in range(3)]
    finally:
        fault.revert("f-lat-1", request)
    assert all(body == "hello" and 0.28 <= took < 3.0 for body, took in answers), answers
    body, took = _get(service)
    assert body == "hello" and took < 0.25
    fault.revert("f-lat-1", request)  # idempotent


@contextlib.contextmanager
def other_nat_rules(present: bool) -> Iterator[None]:
    """Another NAT chain on the host (as Docker's are), or none: a connection opened
    while one is there is never translated later, one opened without is cut by the first
    redirect (so a fault that relied on either behaved differently from host to host)."""
    name = f"{PREFIX}_other"
    if present:
        sh("nft", "add", "table", "ip", name)
        sh("nft", "add", "chain", "ip", name, "out",
           "{ type nat hook output priority -100 ; policy accept ; }")
    try:
        yield
    finally:
        if present:
            sh("nft", "delete", "table", "ip", name)


@pytest.mark.parametrize("other_nat", [False, True], ids=["no-other-nat", "other-nat"])
def test_a_client_kept_alive_from_before_reconnects_through_the_proxy(
        service: int, other_nat: bool) -> None:
    """A connection opened before the fault (a prober or load balancer kept alive) does
    not bypass the proxy, whether or not the host had other NAT rules when it was opened:
    the fault resets the service's end of each of them (so each one's next request
    fails, once), and each client's next connection gets the latency. The kernel's own
    socket table says none is left open."""
    clients = [http.client.HTTPConnection("127.0.0.1", service, timeout=5) for _ in range(3)]
    with other_nat_rules(other_nat):
        for kept in clients:
            kept.request("GET", "/")
            assert kept.getresponse().read() == b"hello"
        _check_kept_alive(service, clients)


def _check_kept_alive(service: int, clients: list[http.client.HTTPConnection]) -> None:
    fault = ServiceProxyFault("service.latency", prefix=PREFIX)
    request = FaultRequest("service.latency", {"port": service}, {"delay_ms": 300})
    details = fault.apply("f-kept-1", request)
    try:
        assert details["connections_reset"] == len(clients)
        assert details["connections_left"] == 0
        for kept in clients:
            with pytest.raises((OSError, http.client.HTTPException)):
                kept.request("GET", "/")
                kept.getresponse().read()
            kept.close()
            kept.request("GET", "/")  # http.client opens a new connection
            started = time.monotonic()
            assert kept.getresponse().read() == b"hello"
            assert time.monotonic() - started >= 0.28
    finally:
        for kept in clients:
            kept.close()
        fault.revert("f-kept-1", request)


def test_timeout_stalls_requests_then_resets_them(service: int) -> None:
    fault = ServiceProxyFault("service.timeout", prefix=PREFIX)
    request = FaultRequest("service.timeout", {"port": service}, {"hang_s": 0.6})
    fault.apply("f-to-1", request)
    try:
        assert _get(service, timeout_s=0.3)[0] == "TimeoutError"
        body, took = _get(service, timeout_s=5.0)
        assert body in ("ConnectionResetError", "RemoteDisconnected") and 0.5 <= took < 3.0
    finally:
        fault.revert("f-to-1", request)
    assert _get(service, timeout_s=1.0)[0] == "hello"


def test_the_stall_ends_with_its_duration_and_held_requests_go_through(service: int) -> None:
    fault = ServiceProxyFault("service.timeout", prefix=PREFIX)
    request = FaultRequest("service.timeout", {"port": service},
                           {"hang_s": 30, "duration_s": 0.8})
    fault.apply("f-to-2", request)
    try:
        body, took = _get(service, timeout_s=5.0)
    finally:
        fault.revert("f-to-2", request)
    assert body == "hello" and 0.6 <= took < 3.0


@pytest.mark.parametrize(("target", "params", "message"), [
    ({}, {}, "target.port"),
    ({"port": 80, "address": "nowhere"}, {}, "target.address"),
    ({"port": 80}, {"percent": 50}, "params.percent"),
    ({"port": 80}, {"jitter_ms": 5}, "params.jitter_ms"),
])
def test_bad_requests_are_refused(target: dict[str, object], params: dict[str, object],
                                  message: str) -> None:
    with pytest.raises(FaultRejected, match=message):
        ServiceProxyFault("service.latency", prefix=PREFIX).apply(
            "f-bad", FaultRequest("service.latency", target, params))
    assert leftovers() == []


def test_a_request_in_flight_when_the_fault_is_reverted_gets_its_answer(service: int) -> None:
    """The proxy is drained on revert, not dropped: a request waiting out a 5 s latency
    when the fault is reverted is answered at once."""
    fault = ServiceProxyFault("service.latency", prefix=PREFIX)
    request = FaultRequest("service.latency", {"port": service}, {"delay_ms": 5000})
    fault.apply("f-lat-2", request)
    answers: list[tuple[str, float]] = []
    try:
        sender = threading.Thread(target=lambda: answers.append(_get(service)))
        sender.start()
        time.sleep(0.5)  # the request now waits in the proxy
        assert answers == []
    finally:
        fault.revert("f-lat-2", request)
    sender.join(5)
    assert len(answers) == 1 and answers[0][0] == "hello" and answers[0][1] < 3.0, answers
