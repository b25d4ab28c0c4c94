"""The impairable TCP relay behind the lab's links and the host's service proxy: real
sockets, a real HTTP server and client on loopback; the phases runner; validation of
the net/service actions and experiments before anything is injected."""

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from chaoslib.exceptions import ActivityFailed

from faults import net, service
from gameday.kinds import CATALOGUE
from gameday.lab.httpjson import ConnectionPool, JsonServer, json_response
from gameday.node.phases import Phase, PhaseRunner, flap_phases, hold_phases
from gameday.node.tcprelay import Impairment, Relay
from tests.conftest import cli_env, gameday


@pytest.fixture
def server() -> Iterator[JsonServer]:
    srv = JsonServer({("POST", "/partial"): lambda _: json_response(200, {"ok": True})})
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def relay() -> Iterator[Relay]:
    tunnel = Relay(tunnel=True, name="test", rng=random.Random(7)).start()
    yield tunnel
    tunnel.stop()
    assert tunnel.connections() == 0


def _pool(server: JsonServer, relay: Relay) -> ConnectionPool:
    return ConnectionPool(server.url, timeout=3.0, via=f"127.0.0.1:{relay.port}")


def test_combined_impairments() -> None:
    both = Impairment.combine([Impairment(loss=0.5), Impairment(loss=0.5, delay_s=0.1),
                               Impairment(hold=True, hold_s=2.0), Impairment(hold=True)])
    assert both == Impairment(False, True, 0.75, 0.1, 2.0)
    assert Impairment.combine([]).clear


def test_down_resets_pooled_connections_and_up_serves_again(server: JsonServer,
                                                            relay: Relay) -> None:
    pool = _pool(server, relay)
    assert pool.post("/partial", b"{}")[0] == 200
    assert relay.connections() == 1
    relay.impair("f", Impairment(down=True))
    with pytest.raises(OSError, match="reset"):
        pool.post("/partial", b"{}")
    relay.lift("f")
    assert pool.post("/partial", b"{}")[0] == 200
    assert relay.stats.reset >= 1


def test_loss_costs_retransmission_timeouts_not_errors(server: JsonServer) -> None:
    relay = Relay(tunnel=True, name="lossy", rng=random.Random(3), rto_min_s=0.05).start()
    try:
        pool = _pool(server, relay)
        pool.post("/partial", b"{}")
        relay.impair("f", Impairment(loss=0.3))
        started = time.monotonic()
        answers = [pool.post("/partial", b"{}")[0] for _ in range(10)]
        took = time.monotonic() - started
    finally:
        relay.stop()
    assert answers == [200] * 10
    assert relay.stats.lost > 0 and took >= relay.stats.lost * 0.05 * 0.9


def test_hold_waits_until_lifted_and_hold_s_cuts(server: JsonServer, relay: Relay) -> None:
    pool = _pool(server, relay)
    pool.post("/partial", b"{}")
    relay.impair("f", Impairment(hold=True))
    answers: list[int] = []
    waiter = threading.Thread(target=lambda: answers.append(pool.post("/partial", b"{}")[0]))
    waiter.start()
    time.sleep(0.3)
    assert answers == []
    relay.lift("f")
    waiter.join(3)
    assert answers == [200]
    relay.impair("g", Impairment(hold=True, hold_s=0.2))
    started = time.monotonic()
    with pytest.raises(OSError):
        pool.post("/partial", b"{}")
    assert time.monotonic() - started < 2.0


def test_a_tunnel_only_reaches_allowed_hosts(relay: Relay) -> None:
    import socket
    with socket.create_connection(("127.0.0.1", relay.port), timeout=2) as sock:
        sock.sendall(b"CONNECT 192.0.2.1:80 HTTP/1.0\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 403")


def test_phases_always_end_off() -> None:
    assert flap_phases(1, 2, 2) == [Phase(True, 1), Phase(False, 2), Phase(True, 1)]
    assert hold_phases(None) == [Phase(True, None)]
    calls: list[str] = []
    runner = PhaseRunner("t", [Phase(True, None)], on=lambda: calls.append("on"),
                         off=lambda: calls.append("off")).start()
    time.sleep(0.05)
    runner.cancel()
    assert calls == ["on", "off"] and runner.finished
    failing = PhaseRunner("t", flap_phases(0.01, 0.01, 2), on=lambda: 1 / 0,  # type: ignore
                          off=lambda: calls.append("off")).start()
    failing.cancel()
    assert calls[-1] == "off"


def test_catalogue_has_the_network_and_service_kinds() -> None:
    for name in ("net.link_flap", "net.loss", "net.partition", "service.latency",
                 "service.timeout"):
        kind = CATALOGUE[name]
        assert kind.injected_at["lab"] == "virtual" and kind.injected_at["host"] == "network"
    assert CATALOGUE["net.loss"].coverage_layer == "network"
    assert CATALOGUE["service.timeout"].coverage_layer == "service"


@pytest.mark.parametrize(("call", "message"), [
    (lambda: net.link_flap({"node": "node-1"}, count=0), "count: must be >= 1"),
    (lambda: net.packet_loss(percent=120), "percent: must be <= 100"),
    (lambda: net.partition(mechanism="netem"), "mechanism: must be one of"),
    (lambda: service.latency(delay_ms=-1), "delay_ms: must be >= 0"),
    (lambda: service.timeout(hang_s="30"), "hang_s: must be a number"),  # type: ignore
])
def test_actions_refuse_bad_arguments_before_anything(call: object, message: str) -> None:
    with pytest.raises(ActivityFailed, match=message):
        call()  # type: ignore[operator]


def test_a_bad_experiment_exits_2_naming_file_key_and_line(tmp_path: Path) -> None:
    source = Path("experiments/link-flap-node.yaml").read_text()
    broken = tmp_path / "flap.yaml"
    broken.write_text(source.replace("count: 2", "count: -1"))
    result = gameday(["run", str(broken), "--target", "none"], cli_env(tmp_path))
    assert result.returncode == 2
    assert "flap.yaml:" in result.stderr and "arguments.count" in result.stderr


def _slow_server(answer_after_s: float) -> JsonServer:
    def slow(_: object) -> object:
        time.sleep(answer_after_s)
        return json_response(200, {"ok": True})
    return JsonServer({("POST", "/partial"): slow})  # type: ignore[dict-item]


@pytest.mark.parametrize("impairment", [Impairment(delay_s=5.0), Impairment(hold=True)],
                         ids=["latency", "stall"])
def test_drain_lets_the_request_in_flight_get_its_answer(impairment: Impairment) -> None:
    """A request sent through an impaired relay, still in flight when the fault is
    reverted (drained), gets its answer; an idle kept-alive connection is closed, not
    reset; the relay ends with no connection and no reset."""
    server = _slow_server(0.3)
    server.start()
    relay = Relay(tunnel=True, name="drain").start()
    try:
        idle = _pool(server, relay)
        assert idle.post("/partial", b"{}")[0] == 200  # a kept-alive, answered connection
        relay.impair("f", impairment)
        answers: list[object] = []
        sender = threading.Thread(target=lambda: answers.append(
            _pool(server, relay).post("/partial", b"{}")[0]))
        sender.start()
        wait_for = time.monotonic() + 3
        while relay.connections() < 2 and time.monotonic() < wait_for:
            time.sleep(0.01)
        time.sleep(0.1)  # the request is in the relay, waiting out the impairment
        assert answers == []
        started = time.monotonic()
        assert relay.drain(timeout_s=5.0) == 0
        sender.join(5)
        assert answers == [200]
        assert time.monotonic() - started < 3.0
        assert relay.connections() == 0 and relay.stats.reset == 0
    finally:
        relay.stop()
        server.stop()


def test_drain_resets_what_is_still_busy_at_its_deadline() -> None:
    server = _slow_server(2.0)
    server.start()
    relay = Relay(tunnel=True, name="drain-late").start()
    try:
        answers: list[object] = []

        def send() -> None:
            try:
                answers.append(_pool(server, relay).post("/partial", b"{}")[0])
            except OSError as exc:
                answers.append(type(exc).__name__)
        sender = threading.Thread(target=send)
        sender.start()
        time.sleep(0.3)
        assert relay.drain(timeout_s=0.3) == 1
        sender.join(5)
        assert answers and answers[0] != 200 and relay.stats.reset == 1
    finally:
        relay.stop()
        server.stop()
