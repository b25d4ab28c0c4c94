"""The write-ahead ledger: a real ``gameday run`` SIGKILLed between sending a fault
request and reading its answer leaves nothing that ``gameday cleanup`` does not resolve.

The agents are real (real HTTP, real bearer token) on the lab's virtual GPU backend (the
stand-in for NVML); the lateness is deterministic: a backend whose apply waits for the
test (:class:`bench.late_agent.LateBackend`), or a real TCP proxy that holds the
request (:class:`bench.late_agent.HoldingProxy`).
"""

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.late_agent import HoldingProxy, LateBackend, experiment
from gameday.agent.server import AgentServer
from gameday.engine.fanout import FanoutOptions
from gameday.engine.fault_requests import InjectRequest
from gameday.engine.session import Session
from gameday.errors import AgentError
from gameday.evidence.ledger import open_intents
from gameday.lab.devices import VirtualGpuBackend
from gameday.targets.base import Target
from gameday.wire.agent_client import AgentClient
from tests.safety.safety_helpers import REPO, TOKEN, env_for, gameday
from tests.waiting import wait_until

ECC = {"kind": "single_bit", "count": 1}


@contextmanager
def late_agent(tmp: Path) -> Iterator[tuple[AgentServer, LateBackend]]:
    backend = LateBackend("node-0", tmp / "node-0-state", gpus=2)
    server = AgentServer(backend, token=TOKEN, node="node-0",
                         state_path=tmp / "node-0-agent.json").start()
    try:
        yield server, backend
    finally:
        backend.release.set()
        server.stop()


def _run_until(tmp: Path, url: str, arrived: object) -> subprocess.Popen[str]:
    """Start ``gameday run`` of a batch of two ECC faults against the agent at ``url``;
    return it once ``arrived`` (an Event) says its request is in flight."""
    path = experiment(tmp / "exp.yaml", gpu={"node": "node-0"}, lease_s=120)
    env = dict(env_for(tmp), GAMEDAY_AGENT_URL=url, GAMEDAY_AGENT_TOKEN=TOKEN)
    proc = subprocess.Popen([str(Path(sys.executable).parent / "gameday"), "run", str(path)],
                            env=env, cwd=REPO, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    assert arrived.wait(60), "the request never arrived"  # type: ignore[attr-defined]
    return proc


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL


def _ledger_events(tmp: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in
            (tmp / "home" / "ledger.jsonl").read_text().splitlines()]


def test_a_run_killed_while_the_agent_applies_is_resolved_as_reverted(tmp_path: Path) -> None:
    """The agent applies the batch after the orchestrator died: the ledger has only the
    intents, and cleanup finds the faults by request id and reverts them."""
    with late_agent(tmp_path) as (server, backend):
        proc = _run_until(tmp_path, server.url, backend.arrived)
        _kill(proc)
        backend.release.set()  # the agent now applies what nobody will read
        wait_until(lambda: len(server.registry.faults()) == 2, what="the late apply")
        events = _ledger_events(tmp_path)
        assert [e["event"] for e in events] == ["intent"], events
        assert len(open_intents(tmp_path / "home" / "ledger.jsonl")) == 2
        env = dict(env_for(tmp_path), GAMEDAY_AGENT_URL=server.url, GAMEDAY_AGENT_TOKEN=TOKEN)
        done = gameday(["cleanup"], env)
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.strip().splitlines()
        assert sum(line.startswith("reverted: gpu.ecc f-") for line in lines) == 2, lines
        assert lines[-1] == "cleanup: 2 reverted, 0 skipped, 0 failed"
        assert server.registry.faults() == []
        resolved = [e for e in _ledger_events(tmp_path) if e["event"] == "resolved"]
        assert sorted(e["outcome"] for e in resolved) == ["reverted", "reverted"]
        again = gameday(["cleanup"], env)
        assert again.stdout.strip() == "cleanup: nothing to revert", again.stdout


#: An orchestrator that injects one fault (a batch of one, the path of node, process and
#: storage faults): agent URL argv[1], token argv[2], ledger argv[3].
SINGLE = """
import sys
from pathlib import Path
from gameday.wire.agent_client import AgentClient
from gameday.engine.fault_requests import InjectRequest
from gameday.engine.session import Session
from gameday.targets.base import Target
client = AgentClient(sys.argv[1], sys.argv[2], timeout_s=60)
session = Session(target=Target(kind="host", agents={"node-0": client}, source="t"),
                  ledger_path=Path(sys.argv[3]))
session.inject([InjectRequest("node-0", "gpu.ecc", {"gpu": 1},
                              {"kind": "single_bit", "count": 1})], lease_s=120)
"""


def test_a_single_request_killed_in_flight_is_resolved_too(tmp_path: Path) -> None:
    with late_agent(tmp_path) as (server, backend):
        ledger = tmp_path / "home" / "ledger.jsonl"
        proc = subprocess.Popen([sys.executable, "-c", SINGLE, server.url, TOKEN,
                                 str(ledger)], env=env_for(tmp_path), cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert backend.arrived.wait(60), "the request never arrived"
        _kill(proc)
        backend.release.set()
        wait_until(lambda: len(server.registry.faults()) == 1, what="the late apply")
        [intent] = open_intents(ledger)
        assert intent["target"] == {"gpu": 1}
        env = dict(env_for(tmp_path), GAMEDAY_AGENT_URL=server.url, GAMEDAY_AGENT_TOKEN=TOKEN)
        done = gameday(["cleanup"], env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.strip().splitlines()[-1] == "cleanup: 1 reverted, 0 skipped, 0 failed"
        assert server.registry.faults() == [] and open_intents(ledger) == []


def test_a_request_still_on_its_way_is_refused_once_resolved(tmp_path: Path) -> None:
    """The request has left the killed orchestrator but not reached the agent: cleanup
    records it as never applied, and when it does arrive the agent refuses it."""
    with late_agent(tmp_path) as (server, backend):
        backend.release.set()  # the backend answers at once; the proxy holds
        proxy = HoldingProxy(("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
        try:
            proc = _run_until(tmp_path, proxy.url, proxy.arrived)
            _kill(proc)
            env = dict(env_for(tmp_path), GAMEDAY_AGENT_URL=proxy.url,  # the ledger's URL
                       GAMEDAY_AGENT_TOKEN=TOKEN)
            done = gameday(["cleanup"], env)
            assert done.returncode == 0, done.stdout + done.stderr
            lines = done.stdout.strip().splitlines()
            assert sum(line.startswith("never applied: gpu.ecc request r-")
                       for line in lines) == 2, lines
            assert lines[-1] == "cleanup: 0 reverted, 2 never applied, 0 skipped, 0 failed"
            [intent] = [e for e in _ledger_events(tmp_path) if e["event"] == "intent"]
            ids = [r["request_id"] for r in intent["requests"]]  # type: ignore[attr-defined]
            proxy.release.set()  # the request arrives now: refused, nothing applied
            client = AgentClient(server.url, TOKEN)
            for request_id in ids:
                try:
                    client.inject("gpu.ecc", {"gpu": 0}, ECC, 60, request_id=request_id)
                except AgentError as exc:
                    assert exc.status == 409 and "resolved as never applied" in str(exc)
                else:
                    raise AssertionError("a resolved request was applied")
            assert server.registry.faults() == []
        finally:
            proxy.close()


def test_a_retried_request_is_applied_once(tmp_path: Path) -> None:
    """The request id is an idempotency key: the same single or batch request sent again
    answers the faults the first one made, and applies nothing more."""
    backend = VirtualGpuBackend("node-0", tmp_path / "state", gpus=2)
    with AgentServer(backend, token=TOKEN, node="node-0",
                     state_path=tmp_path / "agent.json").start() as server:
        client = AgentClient(server.url, TOKEN)
        first = client.inject("gpu.ecc", {"gpu": 0}, ECC, 60, request_id="r-one")
        again = client.inject("gpu.ecc", {"gpu": 0}, ECC, 60, request_id="r-one")
        assert again["id"] == first["id"] and len(server.registry.faults()) == 1
        batch = [{"kind": "gpu.ecc", "target": {"gpu": 1}, "params": ECC, "lease_s": 60,
                  "request_id": "r-two"}]
        [made] = client.inject_many(batch)
        [remade] = client.inject_many(batch)
        assert remade["id"] == made["id"] and len(server.registry.faults()) == 2
        outcomes = client.resolve_requests(["r-one", "r-never"])
        assert [o["outcome"] for o in outcomes] == ["reverted", "never_applied"]
        assert outcomes[0]["fault"]["id"] == first["id"]
        assert [f.id for f in server.registry.faults()] == [made["id"]]


def test_a_run_that_lives_resolves_its_unanswered_requests_when_it_closes(
        tmp_path: Path) -> None:
    """An answer that never came (the client's timeout) leaves the intent open; closing
    the session asks the agent, which reverts the fault applied meanwhile."""
    with late_agent(tmp_path) as (server, backend):
        client = AgentClient(server.url, TOKEN, timeout_s=0.5)
        session = Session(target=Target(kind="host", agents={"node-0": client}, source="t"),
                          ledger_path=tmp_path / "ledger.jsonl")
        try:
            session.inject([InjectRequest("node-0", "gpu.ecc", {"gpu": 0}, ECC)], lease_s=60,
                           options=FanoutOptions(attempts=1))
        except AgentError as exc:
            assert exc.status is None  # no answer in time
        else:
            raise AssertionError("the late agent answered in time")
        [open_one] = session.ledger.open_intents()
        backend.release.set()
        assert session.close() == []
        assert server.registry.faults() == []
        assert open_intents(tmp_path / "ledger.jsonl") == []
        [resolved] = [json.loads(line) for line in
                      (tmp_path / "ledger.jsonl").read_text().splitlines()
                      if '"resolved"' in line]
        assert resolved["request_id"] == open_one.request_id
        assert resolved["outcome"] == "reverted"


def test_a_fan_out_writes_what_landed_while_a_late_agent_still_works(tmp_path: Path) -> None:
    """Three real agents, one late: the faults the other two applied are in the ledger
    file while the late one's request is still in flight (a fan-out writes the lines of
    each wake-up's answers before it sends more; the fsync comes at its end), so an
    orchestrator killed then leaves cleanup their ``applied`` lines, and the late one's
    intent; once it answers, all three are there, synced."""
    import threading

    with late_agent(tmp_path) as (late, backend):
        fast = [AgentServer(VirtualGpuBackend(node, tmp_path / f"{node}-state", gpus=1),
                            token=TOKEN, node=node,
                            state_path=tmp_path / f"{node}-agent.json").start()
                for node in ("node-1", "node-2")]
        try:
            agents = {"node-0": AgentClient(late.url, TOKEN, timeout_s=60),
                      **{s.node: AgentClient(s.url, TOKEN) for s in fast}}
            session = Session(target=Target(kind="host", agents=agents, source="t"),
                              ledger_path=tmp_path / "ledger.jsonl")
            requests = [InjectRequest(node, "gpu.ecc", {"gpu": 0}, ECC) for node in agents]
            done: list[object] = []
            worker = threading.Thread(target=lambda: done.append(
                session.inject(requests, lease_s=60)))
            worker.start()
            assert backend.arrived.wait(30)

            def applied_nodes() -> set[str]:
                lines = [json.loads(line) for line in
                         (tmp_path / "ledger.jsonl").read_text().splitlines()]
                return {str(e["node"]) for e in lines if e["event"] == "applied"}

            wait_until(lambda: applied_nodes() == {"node-1", "node-2"},
                       what="the fast agents' lines while the late one works")
            assert [i.node for i in session.ledger.open_intents()] == ["node-0"]
            backend.release.set()
            worker.join(30)
            assert len(done) == 1 and applied_nodes() == {"node-0", "node-1", "node-2"}
            assert open_intents(tmp_path / "ledger.jsonl") == []
            assert session.close() == []
        finally:
            for server in fast:
                server.stop()
