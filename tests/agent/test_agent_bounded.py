"""Bounded work at the agent: the lease reaper and ``/healthz`` go on while a request's
state write hangs on a real stalled FUSE filesystem; a live agent process (``gameday
agent serve --backend host --policy``) keeps answering ``/healthz`` under a
catastrophic-backtracking ``cmdline`` pattern, a 1,024-item check, slow-header clients
and every connection slot busy. Latencies are printed, never asserted."""

import json
import pathlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gameday.agent.server import AgentServer
from gameday.contract.backend import FaultRequest
from gameday.errors import AgentError
from gameday.node.host.fusefs import FaultFsLayers
from gameday.node.host.storage import FuseStorageFault
from gameday.node.processes import MAX_PATTERN_CHARS, NO_ALLOWED_MATCH
from gameday.wire.agent_client import AgentClient
from gameday.wire.protocol import MAX_BATCH_ITEMS
from tests.agent.agent_marker import KIND, MarkerBackend, kill, read_url, run_agent
from tests.waiting import wait_until

TOKEN = "b7e1f3a5c9d2e4f6a8b0c2d4e6f8a0b2c4d6e8f0a2b4c6d8e0f2a4b6c8d0e2f4"
BACKTRACKING = "(a+)+\\x00"  # exponential in a backtracking engine over 60 a's


class HealthWatch:
    """Asks ``GET /healthz`` over and over on a thread of its own until stopped; keeps
    every status and the worst latency seen."""

    def __init__(self, url: str, **client: Any) -> None:
        self._client = AgentClient(url, TOKEN, timeout_s=30, **client)
        self._stop = threading.Event()
        self.statuses: list[bool] = []
        self.worst_s = 0.0
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> "HealthWatch":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(60)
        self._client.close()

    def _watch(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.statuses.append(bool(self._client.health()["ok"]))
            except AgentError:
                self.statuses.append(False)
            self.worst_s = max(self.worst_s, time.monotonic() - started)
            self._stop.wait(0.02)


def test_reaper_and_health_go_on_while_a_state_write_hangs(tmp_path: pathlib.Path) -> None:
    """The state directory is stalled by a real fault filesystem while a request writes
    it: that request waits (bounded), but a 1 s lease still expires and is reverted by
    the reaper, and ``/healthz`` answers, before the stall ends."""
    stall = FuseStorageFault("storage.stall", FaultFsLayers(tmp_path / "gdsto-layers"))
    if stall.unavailable():
        pytest.skip(str(stall.unavailable()))
    state_dir = tmp_path / "gdsto-state"
    state_dir.mkdir()
    markers = MarkerBackend(tmp_path / "markers")
    request = FaultRequest("storage.stall", {"path": str(state_dir)}, {"duration_s": 8})
    outcome: dict[str, Any] = {}

    def inject_during_the_stall() -> None:
        with AgentClient(server.url, TOKEN, timeout_s=60) as other:
            try:
                outcome["fault"] = other.inject(KIND, {"gpu": 1}, {}, 60)
            except AgentError as exc:
                outcome["error"] = exc

    with AgentServer(markers, token=TOKEN, node="n", state_path=state_dir / "agent.json"
                     ) as server, AgentClient(server.url, TOKEN) as client:
        short = client.inject(KIND, {"gpu": 0}, {}, 1)
        stall.apply("stall-state", request)
        writer = threading.Thread(target=inject_during_the_stall)
        try:
            with HealthWatch(server.url) as health:
                writer.start()
                wait_until(lambda: short["id"] not in markers.markers(), 30)
                still_waiting = writer.is_alive()
            print(f"state stalled: lease reverted while the write hung; /healthz worst "
                  f"{health.worst_s * 1000:.1f} ms over {len(health.statuses)} asks")
            assert still_waiting, "the reaper waited for the stalled state write"
            assert health.statuses and all(health.statuses)
        finally:
            stall.revert("stall-state", request)
            writer.join(60)
        assert "fault" in outcome or "error" in outcome
    assert markers.markers() == set()


@pytest.fixture
def live_agent(tmp_path: pathlib.Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A real ``gameday agent serve --backend host`` whose policy allows pausing one
    harmless sleeper (its command line holds 60 a's: bait for backtracking engines)."""
    marker = "a" * 60
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                               f"gdbound-{tmp_path.name}", marker])
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"kinds": ["process.pause"], "max_active": 1024,
                                  "processes": {"cmdline": [f"gdbound-{tmp_path.name}"]}}))
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    env = {"PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[2]),
           "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}
    proc = run_agent(["--backend", "host", "--policy", str(policy), "--listen",
                      "127.0.0.1:0", "--token-file", str(token), "--state-dir",
                      str(tmp_path / "state"), "--node", "bounded"], env,
                     tmp_path / "agent.stderr")
    try:
        yield read_url(proc, 30), holder
    finally:
        kill(proc)
        holder.kill()
        holder.wait()


def test_a_live_agent_answers_health_under_backtracking_patterns_and_big_checks(
        live_agent: tuple[str, subprocess.Popen[bytes]]) -> None:
    url, holder = live_agent
    pattern_item = {"kind": "process.pause", "target": {"cmdline": BACKTRACKING},
                    "lease_s": 10}
    with AgentClient(url, TOKEN, timeout_s=120) as client, HealthWatch(url) as health:
        for _ in range(20):
            with pytest.raises(AgentError) as refused:
                client.inject("process.pause", {"cmdline": BACKTRACKING}, {}, 10)
            assert refused.value.status == 403 and NO_ALLOWED_MATCH in str(refused.value)
        distinct = [{"kind": "process.pause",
                     "target": {"cmdline": f"(a+)+\\x00|gdbound-x{n:04d}"}, "lease_s": 10}
                    for n in range(MAX_BATCH_ITEMS - 1)]
        started = time.monotonic()
        results = client.check_many([*distinct, pattern_item])
        check_s = time.monotonic() - started
        assert len(results) == MAX_BATCH_ITEMS
        assert {r["status"] for r in results} == {403}  # each matches no process
        with pytest.raises(AgentError) as batch:
            client.inject_many(distinct)
        assert batch.value.status == 403
        paused = client.inject("process.pause", {"cmdline": "gdbound-.*a{60}$"}, {}, 10)
        assert paused["details"]["processes"][0]["pid"] == holder.pid
        client.revert(paused["id"])
        assert len(BACKTRACKING) < MAX_PATTERN_CHARS
    print(f"live agent: 1,024-item check in {check_s * 1000:.0f} ms; /healthz worst "
          f"{health.worst_s * 1000:.1f} ms over {len(health.statuses)} asks")
    assert health.statuses and all(health.statuses)


def test_a_live_agent_answers_health_with_slow_header_clients_on_every_slot(
        live_agent: tuple[str, subprocess.Popen[bytes]]) -> None:
    url, _ = live_agent
    port = int(url.rsplit(":", 1)[1])
    slow: list[socket.socket] = []
    try:
        for _ in range(16):  # the per-source cap: every slot this source may hold
            conn = socket.create_connection(("127.0.0.1", port))
            conn.sendall(b"POST /v1/faults HTTP/1.1\r\nHost: x\r\n")  # and no more
            slow.append(conn)
        time.sleep(0.3)
        with HealthWatch(url) as health:
            time.sleep(2.0)
        with AgentClient(url, TOKEN) as client, pytest.raises(AgentError) as busy:
            client.faults()
        assert busy.value.status == 503  # only /healthz while the slots are held
    finally:
        for conn in slow:
            conn.close()
    print(f"slow-header clients on all 16 slots: /healthz worst "
          f"{health.worst_s * 1000:.1f} ms over {len(health.statuses)} asks")
    assert health.statuses and all(health.statuses)
