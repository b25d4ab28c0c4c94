"""Fan-out across a fleet: a result per target, retries, and all-or-nothing.

Stand-ins: the Kubernetes API (gameday/testing/kube.py, real HTTP, the REAL ``kubernetes``
client) for discovery, and the GPUs (virtual). Real: 32 in-process agents (each a real
HTTP server on loopback; in-process so that 32 of them stay cheap), their leases and
state files, the session's ledger.
"""

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chaoslib.exceptions import ActivityFailed

import faults.gpu as gpu_faults
from gameday.contract.backend import FaultRequest
from gameday.engine import session as sessions
from gameday.engine.fault_requests import (
    FanoutFailed,
    FanoutOptions,
    InjectRequest,
)
from gameday.errors import FaultRejected
from gameday.evidence.ledger import open_intents
from gameday.lab.devices import VirtualGpuBackend
from gameday.safety import signals
from gameday.targets.base import Target
from gameday.targets.kubernetes.target import kubernetes_target
from gameday.testing.kube import running_standin
from gameday.wire.agent_client import AgentClient
from tests.kubernetes.k8s_cluster import (
    AGENT_TOKEN,
    NAMESPACE,
    AgentFleet,
    api_configuration,
    inprocess_agents,
    register_agent,
)
from tests.loopback import serving

NODES = [f"n{i:02d}" for i in range(32)]

ECC_PARAMS = {"kind": "single_bit", "count": 1, "xid": None, "corrupt_weights": False}


class Faulty(VirtualGpuBackend):
    """Virtual GPUs whose apply refuses GPU ``refuse`` and fails ``flaky`` times first."""

    def __init__(self, node: str, state_dir: Path, *, refuse: int | None = None,
                 flaky: int = 0) -> None:
        super().__init__(node, state_dir, gpus=4)
        self.refuse = refuse
        self.flaky = flaky
        self.guard = threading.Lock()

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        with self.guard:
            if self.flaky > 0:
                self.flaky -= 1
                raise RuntimeError("transient device hiccup")
        if request.target.get("gpu") == self.refuse:
            raise FaultRejected(f"gpu {self.refuse} is in maintenance")
        return super().apply(fault_id, request)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[AgentFleet, sessions.Session]]:
    backends = {"n07": Faulty("n07", tmp_path / "gpus" / "n07", refuse=2),
                "n09": Faulty("n09", tmp_path / "gpus" / "n09", flaky=1)}
    with running_standin() as api, inprocess_agents(tmp_path, NODES, gpus=4,
                                                    backends=backends) as agents:
        api.add_secret(NAMESPACE, "gameday-agent-token", {"token": AGENT_TOKEN})
        for server in agents.servers:
            register_agent(api, server.node, server.url, {"rack": f"r{int(server.node[1:]) % 4}"})
        target = kubernetes_target(api_configuration(api))
        session = sessions.activate(sessions.Session(
            target=target, ledger_path=tmp_path / "home" / "ledger.jsonl"))
        try:
            yield agents, session
        finally:
            session.close()
            sessions.deactivate()


def test_a_fleet_fault_is_applied_everywhere_then_reverted(fleet: Any) -> None:
    agents, session = fleet
    result = gpu_faults.ecc_error({"node_labels": {"rack": "r1"}}, count=1)
    # racks r1: n01, n05, ..., n29 (8 nodes x 4 GPUs); n09's first apply failed and was retried
    assert len(result["faults"]) == 32 and agents.active_faults() == 32
    assert {f["gpu"].split("/")[0] for f in result["faults"]} == {f"n{i:02d}" for i in
                                                                  range(1, 32, 4)}
    assert len(session.ledger.active()) == 32
    assert gpu_faults.revert() == {"reverted": 32}
    assert agents.active_faults() == 0 and session.ledger.active() == []


def test_partial_failure_reverts_what_was_applied_and_names_the_failures(fleet: Any) -> None:
    agents, session = fleet
    target = session.require_target()
    gpus = target.resolve_gpus({"percent": 100})
    assert len(gpus) == 128
    gone = next(s for s in agents.servers if s.node == "n11")
    gone.stop(revert=True)  # an agent that dies after discovery: unreachable
    slept: list[float] = []
    with pytest.raises(FanoutFailed) as failed:
        session.inject([InjectRequest(g.node, "gpu.ecc", {"gpu": g.index}, ECC_PARAMS)
                        for g in gpus],
                       options=FanoutOptions(concurrency=16, attempts=3, sleep=slept.append))
    report = failed.value.report
    failed_labels = {r.label(): r for r in report.failed}
    # one batch per agent, all or nothing: n07's other GPUs were not applied either
    assert set(failed_labels) == {f"n{n}/gpu={i}" for n in ("07", "11") for i in range(4)}
    assert "in maintenance" in failed_labels["n07/gpu=2"].error
    assert failed_labels["n07/gpu=0"].error == "not applied: n07/gpu2 in the same batch failed"
    assert failed_labels["n07/gpu=2"].attempts == 1  # a refusal is not retried
    assert failed_labels["n11/gpu=0"].attempts == 3  # unreachable: retried, then given up
    assert "cannot connect" in failed_labels["n11/gpu=0"].error
    n09 = [r for r in report.results if r.node == "n09"]
    assert all(r.ok for r in n09) and max(r.attempts for r in n09) == 2
    assert len(report.applied) == 120 and len(report.rolled_back) == 120
    assert report.rollback_failures == []
    assert agents.active_faults() == 0
    assert len(session.ledger.entries()) == 120 and session.ledger.active() == []
    assert {e.revert_reason for e in session.ledger.entries()} == {"fanout-partial-failure"}
    assert slept  # the back-off went through the injected sleep
    assert str(failed.value).startswith("fan-out failed: 120 of 128 targets ok, 8 failed")
    # through the action, the same is one line
    with pytest.raises(ActivityFailed, match="fan-out failed: 120 of 128 targets ok"):
        gpu_faults.ecc_error({"percent": 100})
    assert agents.active_faults() == 0


class Interrupting(VirtualGpuBackend):
    """Virtual GPUs whose first apply sends SIGINT to this process: a real Ctrl-C,
    arriving in the main thread mid fan-out (gameday's own handlers installed)."""

    sent = False

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        if not Interrupting.sent:
            Interrupting.sent = True
            os.kill(os.getpid(), signal.SIGINT)
        return super().apply(fault_id, request)


def test_an_interruption_mid_fan_out_still_records_what_was_applied(
        tmp_path: Path, gameday_signals: None) -> None:
    nodes = ["i0", "i1", "i2", "i3"]
    backends = {"i2": Interrupting("i2", tmp_path / "gpus" / "i2", gpus=4)}
    Interrupting.sent = False
    with running_standin() as api, inprocess_agents(tmp_path, nodes,
                                                    backends=backends) as agents:
        api.add_secret(NAMESPACE, "gameday-agent-token", {"token": AGENT_TOKEN})
        for server in agents.servers:
            register_agent(api, server.node, server.url)
        target = kubernetes_target(api_configuration(api))
        session = sessions.Session(target=target,
                                   ledger_path=tmp_path / "home" / "ledger.jsonl")
        with pytest.raises(signals.Interrupted):
            session.inject([InjectRequest(g.node, "gpu.ecc", {"gpu": g.index}, ECC_PARAMS)
                            for g in target.resolve_gpus({"percent": 100})],
                           options=FanoutOptions(concurrency=4))
        # nothing more was sent, and every answer in flight was read and recorded:
        # what the agents applied is what the ledger holds (i2's batch at least); the
        # requests never sent are resolved as never applied when the session closes
        assert 4 <= len(session.ledger.active()) == agents.active_faults()
        assert session.close() == [] and open_intents(tmp_path / "home" / "ledger.jsonl") == []
        assert agents.active_faults() == 0


@contextlib.contextmanager
def silent_agent() -> Iterator[str]:
    """A real socket on loopback that accepts connections and reads, but never answers
    (a hung agent)."""
    held: list[socket.socket] = []

    def accept(listener: socket.socket, stop: threading.Event) -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(listener.accept()[0])

    try:
        with serving(accept) as url:
            yield url
    finally:
        for conn in held:
            conn.close()


def hosts_target(agents: AgentFleet, silent_url: str, timeout_s: float) -> Target:
    clients = {s.node: AgentClient(s.url, AGENT_TOKEN, timeout_s=timeout_s)
               for s in agents.servers}
    clients["hung"] = AgentClient(silent_url, AGENT_TOKEN, timeout_s=timeout_s)
    return Target(kind="host", agents=clients, source="test")




def test_an_agent_that_never_answers_times_out_is_retried_and_the_rest_rolled_back(
        tmp_path: Path) -> None:
    """Real agents and a real silent socket; no Kubernetes (a host target)."""
    with inprocess_agents(tmp_path, ["h0", "h1", "h2"]) as agents, silent_agent() as url:
        target = hosts_target(agents, url, timeout_s=0.3)
        session = sessions.Session(target=target, ledger_path=tmp_path / "home" / "l.jsonl")
        requests = [InjectRequest(node, "gpu.ecc", {"gpu": g}, ECC_PARAMS)
                    for node in ("h0", "h1", "hung", "h2") for g in range(2)]
        started = time.monotonic()
        with pytest.raises(FanoutFailed) as failed:
            session.inject(requests, options=FanoutOptions(backoff_s=0.01))
        took = time.monotonic() - started
        report = failed.value.report
        assert {r.label() for r in report.failed} == {"hung/gpu=0", "hung/gpu=1"}
        assert all(r.attempts == 3 and "no answer within the client's timeout" in r.error
                   for r in report.failed if r.error)
        assert len(report.rolled_back) == 6 and agents.active_faults() == 0
        assert 0.9 <= took < 5  # three tries of 0.3 s, not the default 5 s each
        unresolved = session.close()  # the hung agent's requests: applied or not, unknown
        assert len(unresolved) == 2 and all(" on hung: " in line and "requests:resolve" in line
                                            for line in unresolved), unresolved
        assert {i["node"] for i in open_intents(tmp_path / "home" / "l.jsonl")} == {"hung"}


def test_an_interruption_reads_what_is_in_flight_and_gives_up_on_a_hung_agent(
        tmp_path: Path, gameday_signals: None) -> None:
    """A real Ctrl-C (SIGINT, gameday's handlers) arrives while an agent applies and
    another never answers: the answers in flight are read and recorded, the hung one is
    given up at its deadline, and the rollback reverts everything applied."""
    backends = {"h1": Interrupting("h1", tmp_path / "gpus" / "h1", gpus=4)}
    Interrupting.sent = False
    with inprocess_agents(tmp_path, ["h0", "h1", "h2"], backends=backends) as agents, \
            silent_agent() as url:
        target = hosts_target(agents, url, timeout_s=0.5)
        session = sessions.Session(target=target,
                                   ledger_path=tmp_path / "home" / "l.jsonl")
        requests = [InjectRequest(node, "gpu.ecc", {"gpu": g}, ECC_PARAMS)
                    for node in ("hung", "h0", "h1", "h2") for g in range(4)]
        started = time.monotonic()
        with pytest.raises(signals.Interrupted):
            session.inject(requests)
        assert time.monotonic() - started < 3
        assert 4 <= len(session.ledger.active()) == agents.active_faults()
        unresolved = session.close()  # the hung agent's requests stay open, for cleanup
        assert unresolved and all(" on hung: " in line for line in unresolved), unresolved
        assert agents.active_faults() == 0
