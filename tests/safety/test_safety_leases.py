"""The lease renewer keeps every lease alive through agent hiccups.

Real agent, real HTTP, and between them a real TCP relay (sockets and threads in this
test) that can cut every connection for a while, as a flaky network or a busy agent
would. Stand-in: the agent drives the lab's virtual GPUs (no NVML here).
"""

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gameday.engine.fault_requests import InjectRequest
from gameday.engine.session import Session
from gameday.evidence.ledger import read_ledger
from gameday.targets.base import Target
from gameday.wire.agent_client import AgentClient
from tests.safety.safety_helpers import TOKEN, virtual_agents

ECC = {"kind": "single_bit", "count": 1, "xid": None, "corrupt_weights": False}


class Relay:
    """Forwards 127.0.0.1:port to ``upstream``; ``cut()`` refuses and drops connections."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.down = threading.Event()
        self.closed = False
        self.sockets: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        self.listener.settimeout(0.05)
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            if self.down.is_set():
                client.close()
                continue
            server = socket.create_connection(self.upstream)
            with self.lock:
                self.sockets |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self.down.set()
        with self.lock:
            for s in self.sockets:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            self.sockets.clear()

    def restore(self) -> None:
        self.down.clear()

    def close(self) -> None:
        self.closed = True
        self.thread.join(timeout=5)
        self.cut()
        self.listener.close()


@pytest.fixture
def relay_and_agent(tmp_path: Path) -> Iterator[tuple[Relay, object]]:
    with virtual_agents(tmp_path, nodes=1) as servers:
        server = servers["node-0"]
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        relay = Relay((host, int(port)))
        try:
            yield relay, server
        finally:
            relay.close()


def test_renewer_rides_out_cut_connections(relay_and_agent: tuple[Relay, object],
                                           tmp_path: Path) -> None:
    relay, server = relay_and_agent
    client = AgentClient(f"http://127.0.0.1:{relay.port}", TOKEN, timeout_s=1.0)
    ledger = tmp_path / "ledger.jsonl"
    session = Session(target=Target(kind="host", agents={"node-0": client}), ledger_path=ledger)
    session.renewer.tick_s = 0.05
    [entry] = session.inject([InjectRequest("node-0", "gpu.ecc", {"gpu": 0}, ECC)],
                             lease_s=1.5)
    started = time.monotonic()
    while time.monotonic() - started < 3.6:  # over two lease terms, with two cuts of 0.4 s
        if 1.0 < time.monotonic() - started < 1.4 or 2.4 < time.monotonic() - started < 2.8:
            relay.cut()
        else:
            relay.restore()
        assert [f.id for f in server.registry.faults()] == [entry.id], "the lease lapsed"
        time.sleep(0.02)
    relay.restore()
    renewals = [line for line in ledger.read_text().splitlines() if '"renewed"' in line]
    assert len(renewals) >= 3
    assert session.close() == [] and server.registry.faults() == []
    [state] = read_ledger(ledger)
    assert state["reason"] == "rollback"  # the orchestrator asked: its reason


def test_renewer_survives_an_unexpected_error(relay_and_agent: tuple[Relay, object],
                                             tmp_path: Path) -> None:
    relay, server = relay_and_agent
    client = AgentClient(f"http://127.0.0.1:{relay.port}", TOKEN)
    session = Session(target=Target(kind="host", agents={"node-0": client}),
                      ledger_path=tmp_path / "ledger.jsonl")
    session.renewer.tick_s = 0.05
    real_renew = client.renew
    calls = {"n": 0}

    def renew_once_broken(fault_id: str, lease_s: float | None = None) -> dict[str, object]:
        calls["n"] += 1
        if calls["n"] == 1:
            return {}  # an answer without expires_at: a KeyError inside the renewer
        return real_renew(fault_id, lease_s)

    client.renew = renew_once_broken  # type: ignore[method-assign]
    [entry] = session.inject([InjectRequest("node-0", "gpu.ecc", {"gpu": 1}, ECC)],
                             lease_s=2)
    time.sleep(2.0)
    assert calls["n"] >= 3 and [f.id for f in server.registry.faults()] == [entry.id]
    assert session.close() == []
