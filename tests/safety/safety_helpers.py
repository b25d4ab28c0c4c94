"""Helpers for the safety tests: real in-process agents over real HTTP.

The agents run the lab's virtual GPU backend (``gameday.lab.devices``): the only GPUs
this machine has are virtual ones, so that is the stand-in for NVML here; every
request still crosses a real socket with a real bearer token.
"""

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gameday.agent.server import AgentServer
from gameday.lab.devices import VirtualGpuBackend
from gameday.targets.base import Target
from gameday.wire.agent_client import AgentClient

REPO = Path(__file__).resolve().parents[2]
TOKEN = "gdsafe-token-0123456789abcdef"


@contextmanager
def virtual_agents(tmp: Path, nodes: int = 2, gpus: int = 4,
                   token: str = TOKEN) -> Iterator[dict[str, AgentServer]]:
    """``nodes`` real agents on free ports, each with ``gpus`` virtual GPUs."""
    servers: dict[str, AgentServer] = {}
    try:
        for n in range(nodes):
            name = f"node-{n}"
            backend = VirtualGpuBackend(name, tmp / f"{name}-state", gpus=gpus)
            servers[name] = AgentServer(backend, token=token, node=name,
                                        state_path=tmp / f"{name}-agent.json").start()
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def target_of(servers: dict[str, AgentServer], token: str = TOKEN) -> Target:
    return Target(kind="host", agents={name: AgentClient(s.url, token)
                                       for name, s in servers.items()}, source="test")


def active(servers: dict[str, AgentServer]) -> list[dict[str, Any]]:
    return [f.to_json() for s in servers.values() for f in s.registry.faults()]


def env_for(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env["GAMEDAY_HOME"] = str(tmp / "home")
    env["GAMEDAY_JOURNALS"] = str(tmp / "journals")
    return env


def gameday(args: list[str], env: dict[str, str], timeout: float = 120,
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "gameday"), *args], env=env,
                          cwd=REPO, text=True, capture_output=True, timeout=timeout, **kwargs)
