"""The agent's safety lever against real agent processes (marker backend: a fault is a
file another process can see): engaging reverts every fault at once and refuses new
ones with ``423 halted``, the lever survives SIGKILL and a restart on the same state
directory, and engaging and releasing are in the agent's audit trail."""

import json
import pathlib
import signal
import urllib.request

import pytest

from gameday.errors import AgentError
from gameday.wire.agent_client import AgentClient, AgentHalted
from tests.agent.agent_marker import (
    KIND,
    STRONG_TOKEN,
    agent_env,
    kill,
    marker_agent_args,
    marker_dirs,
    marker_names,
    read_url,
    run_agent,
)

TOKEN = STRONG_TOKEN


@pytest.fixture
def dirs(tmp_path: pathlib.Path) -> dict[str, pathlib.Path]:
    return marker_dirs(tmp_path)


def _args(dirs: dict[str, pathlib.Path]) -> list[str]:
    return marker_agent_args(dirs, "lever-node")


_markers = marker_names


def test_lever_reverts_refuses_and_survives_sigkill(dirs: dict[str, pathlib.Path]) -> None:
    env = agent_env(dirs["markers"])
    first = run_agent(_args(dirs), env, dirs["stderr"])
    try:
        with AgentClient(read_url(first, 60), TOKEN) as client:
            held = [client.inject(KIND, {"gpu": 0, "slot": i}, {}, 3600)["id"] for i in range(5)]
            assert _markers(dirs) == set(held)
            engaged = client.halt("on-call: checkout errors up")
            assert engaged["engaged"] is True and engaged["active"] == 0
            assert engaged["engaged_by"].startswith("token:")
            assert _markers(dirs) == set()  # every fault reverted before the answer
            with urllib.request.urlopen(client.url + "/metrics", timeout=10) as answer:
                metrics = answer.read().decode()
            assert "gameday_agent_halted 1.0" in metrics
            assert 'gameday_agent_faults_reverted_total{kind="test.marker",reason="halted"} 5.0' \
                in metrics
            reverted = {f["id"]: f["revert_reason"] for f in client.faults(include_reverted=True)}
            assert all(reverted[i] == "halted" for i in held)
            with pytest.raises(AgentHalted) as refused:
                client.inject(KIND, {"gpu": 0}, {}, 60)
            assert refused.value.status == 423
            assert "halted by token:" in str(refused.value)
            assert "checkout errors up" in str(refused.value)
            assert refused.value.halt["reason"] == "on-call: checkout errors up"
            with pytest.raises(AgentHalted):
                client.inject_many([{"kind": KIND, "target": {"gpu": 1}, "lease_s": 60}])
            with pytest.raises(AgentHalted):
                client.renew(held[0], 60)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        kill(first)
    second = run_agent(_args(dirs), env, dirs["stderr"])
    try:
        with AgentClient(read_url(second, 60), TOKEN) as client:
            assert client.halt_state()["engaged"] is True  # persisted across the restart
            with pytest.raises(AgentHalted):
                client.inject(KIND, {"gpu": 0}, {}, 60)
            assert _markers(dirs) == set()
            released = client.release_halt()
            assert released["engaged"] is False and released["released_by"].startswith("token:")
            fault = client.inject(KIND, {"gpu": 0}, {}, 60)
            assert _markers(dirs) == {fault["id"]}
            client.revert(fault["id"])
    finally:
        kill(second)
    audit = [json.loads(line) for line in
             (dirs["state"] / "audit-lever-node.jsonl").read_text().splitlines()]
    requests = [r for r in audit if r.get("path") == "/v1/halt"]  # not the apply/revert records
    halts = [(r["method"], r["status"], r.get("reason")) for r in requests
             if r["phase"] == "outcome"]
    assert ("POST", 200, "on-call: checkout errors up") in halts
    assert ("DELETE", 200, None) in halts
    assert ("POST", None, "on-call: checkout errors up") in [
        (r["method"], r["status"], r.get("reason")) for r in requests if r["phase"] == "intent"]
    assert all(r["token"] and r["token"].startswith("token:") for r in requests)


def test_halt_body_is_checked(dirs: dict[str, pathlib.Path]) -> None:
    agent = run_agent(_args(dirs), agent_env(dirs["markers"]), dirs["stderr"])
    try:
        with AgentClient(read_url(agent, 60), TOKEN) as client:
            for body in ([1], {"reason": 5}, {"why": "x"}):
                with pytest.raises(AgentError) as bad:
                    client._call("POST", "/v1/halt", body)
                assert bad.value.status == 400
            assert client.halt_state()["engaged"] is False
    finally:
        kill(agent)
