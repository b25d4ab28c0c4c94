"""Test helpers: a "cluster" made of the Kubernetes API stand-in (gameday/testing/kube.py, over
real HTTP) and REAL gameday agents on loopback, either in-process ``AgentServer``s
(cheap, used where many agents are needed) or ``gameday agent serve --backend virtual``
processes. The agents' GPUs are the lab's virtual GPUs (the NVML stand-in).
"""

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gameday.agent.server import AgentServer
from gameday.lab.devices import VirtualGpuBackend
from gameday.testing.kube import KubeStandin

REPO = Path(__file__).resolve().parents[2]
AGENT_TOKEN = "9482659e4eb8c430be29bb0b8e4a62cb7b88fadfdb4a3845669f8c6ab74b83e1"
NAMESPACE = "gameday-system"
AGENT_LABELS = {"app.kubernetes.io/name": "gameday-agent"}


def api_configuration(api: KubeStandin, **extra: Any) -> dict[str, Any]:
    """Run configuration that points gameday at the stand-in (no kubeconfig)."""
    return {"k8s_api_url": api.url, "k8s_api_token": api.token, **extra}


def register_agent(api: KubeStandin, node: str, url: str,
                   labels: dict[str, str] | None = None, *, ready: bool = True) -> None:
    """A GPU node and its agent DaemonSet pod, as the API would show them."""
    port = urlsplit(url).port
    api.add_node(node, {"nvidia.com/gpu.present": "true", **(labels or {})})
    api.add_pod(NAMESPACE, f"gameday-agent-{node}", node, labels=AGENT_LABELS,
                pod_ip="127.0.0.1", port=port, owner_kind="DaemonSet", ready=ready)


@dataclass
class AgentFleet:
    servers: list[AgentServer] = field(default_factory=list)
    processes: list[subprocess.Popen[str]] = field(default_factory=list)

    def active_faults(self) -> int:
        return sum(s.registry.active_count() for s in self.servers)


@contextmanager
def inprocess_agents(tmp: Path, nodes: list[str], *, gpus: int = 4,
                     backends: dict[str, Any] | None = None) -> Iterator[AgentFleet]:
    """In-process agents (real HTTP servers on loopback), one per node."""
    fleet = AgentFleet()
    try:
        for node in nodes:
            backend = (backends or {}).get(node) or VirtualGpuBackend(node, tmp / "gpus" / node,
                                                                     gpus=gpus)
            fleet.servers.append(AgentServer(
                backend, token=AGENT_TOKEN, state_path=tmp / "agents" / f"{node}.json",
                node=node, reap_interval_s=0.5).start())
        yield fleet
    finally:
        for server in fleet.servers:
            server.stop(revert=True)


def agent_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env["GAMEDAY_AGENT_TOKEN"] = AGENT_TOKEN
    env.update(extra)
    return env


def start_agent_process(tmp: Path, node: str, *extra_args: str,
                        env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """``gameday agent serve --backend virtual`` for ``node``; returns (process, url)."""
    process = spawn_agent_process(tmp, node, *extra_args, env=env)
    return process, agent_url(tmp, node, process)


def spawn_agent_process(tmp: Path, node: str, *extra_args: str,
                        env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start the agent process without waiting for it (see :func:`agent_url`)."""
    stderr = open(tmp / f"agent-{node}.stderr", "w")  # noqa: SIM115 - kept for the process
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "gameday"), "agent", "serve", "--backend", "virtual",
         "--listen", "127.0.0.1:0", "--state-dir", str(tmp / "state"), "--node", node,
         *extra_args],
        env=env or agent_env(tmp), cwd=REPO, stdout=subprocess.PIPE, stderr=stderr, text=True)
    stderr.close()
    return process


def agent_url(tmp: Path, node: str, process: subprocess.Popen[str]) -> str:
    """Wait for the agent's ``agent listening on URL`` line; its URL."""
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith("agent listening on "):
        process.kill()
        process.wait(10)
        raise AssertionError(f"agent {node} did not start: {line!r}; stderr: "
                             f"{(tmp / f'agent-{node}.stderr').read_text()[-500:]}")
    return line.removeprefix("agent listening on ")


def stop_process(process: subprocess.Popen[str]) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    if process.stdout is not None:
        process.stdout.close()
    return process.returncode
