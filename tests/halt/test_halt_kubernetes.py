"""The fleet's lever held in ONE Kubernetes object, with the orchestrator gone. The
Kubernetes API is the local **stand-in** (``gameday.testing.kube``: real HTTP, the real
``kubernetes`` client; it serves ConfigMaps but no watches, and the agents read the
object every reconciler round). The agents are real processes (``gameday agent serve
--reconcile-kubernetes``, marker backend: a fault is a file); the lever is thrown by a
real ``gameday halt --kubernetes`` process, which also finds the agents' pods through
the API and asks them directly, and has exited before the agents look again."""

import json
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gameday.testing.kube import KubeStandin, running_standin
from gameday.wire.agent_client import AgentClient, AgentHalted
from tests.agent.agent_marker import KIND, REPO, agent_env, kill, read_url, run_agent

TOKEN = "42" + "0123456789abcdef" * 4
ROUND_S = 0.2


@pytest.fixture
def api() -> Iterator[KubeStandin]:
    with running_standin() as standin:
        standin.add_node("gpu-0")
        standin.add_node("gpu-1")
        yield standin


def _env(api: KubeStandin, markers: pathlib.Path) -> dict[str, str]:
    return dict(agent_env(markers), GAMEDAY_K8S_API_URL=api.url,
                GAMEDAY_K8S_API_TOKEN=api.token, GAMEDAY_K8S_NAMESPACE="gameday-system",
                GAMEDAY_K8S_RECONCILE_S=str(ROUND_S))


def _agent(tmp: pathlib.Path, node: str, env: dict[str, str]) -> subprocess.Popen[str]:
    token = tmp / "token"
    if not token.exists():
        token.write_text(TOKEN + "\n")
        token.chmod(0o600)
    return run_agent(["--backend", "tests.agent.agent_marker:factory", "--listen",
                      "127.0.0.1:0", "--token-file", str(token), "--state-dir",
                      str(tmp / f"state-{node}"), "--node", node, "--reconcile-kubernetes"],
                     env, tmp / f"{node}.stderr")


def _halt(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run([str(pathlib.Path(sys.executable).parent / "gameday"), "halt",
                           "--kubernetes", "--output", "json", *args], env=env, cwd=REPO,
                          text=True, capture_output=True, timeout=60)
    document: dict[str, Any] = json.loads(done.stdout)
    document["returncode"] = done.returncode
    return document


def _until(check: Any, what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _engaged(client: AgentClient) -> bool:
    return bool(client.halt_state()["engaged"])


def _pod(api: KubeStandin, node: str, url: str) -> None:
    """The agent's DaemonSet pod on ``node`` (as the stand-in lists it), serving at ``url``."""
    api.add_pod("gameday-system", f"gameday-agent-{node}", node,
                labels={"app.kubernetes.io/name": "gameday-agent"}, pod_ip="127.0.0.1",
                port=int(url.rsplit(":", 1)[1]), owner_kind="DaemonSet")


def test_the_configmap_halts_every_agent_without_the_orchestrator(
        api: KubeStandin, tmp_path: pathlib.Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    env = _env(api, markers)
    cli_env = dict(env, GAMEDAY_HOME=str(tmp_path / "home"),
                   GAMEDAY_LAB_DIR=str(tmp_path / "no-lab"))
    agents = {node: _agent(tmp_path, node, env) for node in ("gpu-0", "gpu-1")}
    try:
        clients = {node: AgentClient(read_url(proc, 60), TOKEN) for node, proc in agents.items()}
        api.add_secret("gameday-system", "gameday-agent-token", {"token": TOKEN})
        for node, client in clients.items():
            _pod(api, node, client.url)
        held = {node: client.inject(KIND, {"gpu": 0}, {}, 3600)["id"]
                for node, client in clients.items()}
        assert {p.name for p in markers.iterdir()} == set(held.values())

        thrown = _halt(["--reason", "INC-1: fleet-wide ECC storm"], cli_env)
        assert thrown["returncode"] == 0, thrown
        assert thrown["kubernetes"]["engaged"] is True
        assert [a["active"] for a in thrown["agents"]] == [0, 0]  # asked directly, at once
        assert list(markers.iterdir()) == []
        configmap = api.configmaps[("gameday-system", "gameday-halt")]
        assert configmap["data"]["engaged"] == "true"
        assert configmap["data"]["reason"] == "INC-1: fleet-wide ECC storm"
        # the orchestrator (the CLI) is gone; the agents find the object themselves
        for client in clients.values():
            _until(lambda c=client: c.halt_state()["source"] == "kubernetes",
                   "the agent followed the ConfigMap")
        state = clients["gpu-0"].halt_state()
        assert state["source"] == "kubernetes"
        assert state["engaged_by"].startswith("kubernetes:gameday-system/gameday-halt (")
        with pytest.raises(AgentHalted):
            clients["gpu-1"].inject(KIND, {"gpu": 0}, {}, 60)
        with pytest.raises(AgentHalted):  # the object holds it: no local release
            clients["gpu-1"].release_halt()

        # SIGKILL an agent and start it on the same state directory with the API away:
        # the saved lever holds while it cannot read the object
        agents["gpu-0"].send_signal(signal.SIGKILL)
        agents["gpu-0"].wait(timeout=10)
        away = dict(env, GAMEDAY_K8S_API_URL="http://127.0.0.1:9")
        agents["gpu-0"] = _agent(tmp_path, "gpu-0", away)
        clients["gpu-0"] = AgentClient(read_url(agents["gpu-0"], 60), TOKEN)
        _pod(api, "gpu-0", clients["gpu-0"].url)  # its pod, replaced by the DaemonSet
        time.sleep(4 * ROUND_S)
        assert _engaged(clients["gpu-0"])
        with pytest.raises(AgentHalted):
            clients["gpu-0"].inject(KIND, {"gpu": 0}, {}, 60)

        status = _halt(["--status"], cli_env)
        assert status["kubernetes"]["engaged"] is True
        assert [a["engaged"] for a in status["agents"]] == [True, True]

        released = _halt(["--release"], cli_env)
        assert released["returncode"] == 0, released  # each follows the object's release
        by_url = {a["agent"]: a for a in released["agents"]}
        assert by_url[clients["gpu-0"].url]["follows_object"] is True  # cannot read the API
        assert all(a["engaged"] is False or a["follows_object"] for a in released["agents"])
        assert ("gameday-system", "gameday-halt") not in api.configmaps
        _until(lambda: not _engaged(clients["gpu-1"]), "the agent followed the release")
        clients["gpu-1"].revert(clients["gpu-1"].inject(KIND, {"gpu": 0}, {}, 60)["id"])
        assert _engaged(clients["gpu-0"])  # it still cannot read the object: stays halted
        audit = [json.loads(line) for line in
                 (tmp_path / "state-gpu-1" / "audit-gpu-1.jsonl").read_text().splitlines()]
        watched = [(r["path"], r.get("reason")) for r in audit if r.get("method") == "WATCH"]
        assert watched == [("/v1/halt (engaged)", "INC-1: fleet-wide ECC storm"),
                           ("/v1/halt (released)", None)]
    finally:
        for proc in agents.values():
            kill(proc)
