"""A REAL agent for the security suite: ``gameday agent serve --backend host`` as a
subprocess, over mutual TLS (certificates made by the test, :mod:`tests.agent.pki`),
with a narrow policy the test writes; and the real processes the attacks aim at.

Everything the agent reads or writes (token, certificates, policy, state, audit) lives in
``<tmp>/agent``; what a policy may allow lives elsewhere (``<tmp>/data``)."""

import json
import os
import secrets
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from gameday.wire.agent_client import AgentClient
from gameday.wire.tls import client_context
from tests.agent.pki import Pki, loopback_san
from tests.conftest import BIN, REPO, cli_env

TOKEN = "9c1e5a3f7b2d46e8a0c4f8b1d5e9a3c7f0b4d8e2a6c0f4b8d2e6a0c4f8b2d6e0"


@dataclass
class LiveAgent:
    """A running agent: its URL, the client's TLS context, its files, its process."""

    url: str
    tls: ssl.SSLContext
    home: Path  # the agent's own files
    audit: Path
    proc: subprocess.Popen[str]
    stderr: Path
    pki: Pki
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def client(self, token: str = TOKEN) -> AgentClient:
        return AgentClient(self.url, token, timeout_s=20, tls=self.tls)

    def tls_socket(self) -> ssl.SSLSocket:
        """A raw mutual-TLS connection, for hand-written bytes."""
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        return self.tls.wrap_socket(raw, server_hostname="127.0.0.1")

    def audit_records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.audit.read_text().splitlines()]


def start_agent(tmp_path: Path, policy: Mapping[str, Any], *extra: str) -> LiveAgent:
    """Start the agent with ``policy`` (and ``extra`` arguments); wait until it listens."""
    home = tmp_path / "agent"
    home.mkdir(exist_ok=True)
    pki = Pki(home)
    cert, key = pki.issue("agent", "agent", loopback_san())
    client_cert, client_key = pki.issue(
        "orchestrator", "orchestrator",
        [x509.UniformResourceIdentifier("spiffe://gameday.test/orchestrator")])
    token = home / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    policy_file = home / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(dict(policy)))
    audit, stderr = home / "audit" / "audit.jsonl", tmp_path / "agent-stderr.log"
    with stderr.open("w") as err:
        proc = subprocess.Popen(
            [str(BIN / "gameday"), "agent", "serve", "--backend", "host", "--listen",
             "127.0.0.1:0", "--token-file", str(token), "--state-dir", str(home / "state"),
             "--node", "gdsec-host", "--policy", str(policy_file), "--tls-cert", str(cert),
             "--tls-key", str(key), "--tls-client-ca", str(pki.ca_pem), "--audit-log",
             str(audit), *extra],
            cwd=REPO, env=cli_env(tmp_path), text=True, stdout=subprocess.PIPE, stderr=err)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "agent listening on https://" not in line:
        proc.kill()
        proc.wait(10)
        raise AssertionError(f"agent did not start: {line!r} {stderr.read_text()[-2000:]}")
    tls = client_context(pki.ca_pem, client_cert, client_key)
    return LiveAgent(line.split()[-1], tls, home, audit, proc, stderr, pki)


def stop_agent(agent: LiveAgent) -> None:
    if agent.proc.poll() is None:
        agent.proc.terminate()
        assert agent.proc.wait(15) == 0
    for proc in agent.started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(5)


@pytest.fixture
def agent_with(tmp_path: Path) -> Iterator[Callable[..., LiveAgent]]:
    """``agent_with(policy, *extra)``: a live agent with that policy, stopped after."""
    started: list[LiveAgent] = []

    def start(policy: Mapping[str, Any], *extra: str) -> LiveAgent:
        agent = start_agent(tmp_path, policy, *extra)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        stop_agent(agent)


def sleeper(marker: str, *, threads: int = 0, argv0: str | None = None,
            env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A real process that sleeps with ``marker`` in its command line (and ``threads``
    more threads); ``argv0``: the program it runs (a script of the test's)."""
    code = ("import threading, time\n"
            f"for _ in range({threads}):\n"
            "    threading.Thread(target=time.sleep, args=(300,), daemon=True).start()\n"
            "time.sleep(300)\n")
    argv = [argv0] if argv0 else [sys.executable]
    proc = subprocess.Popen([*argv, "-c", code, marker],
                            env={**os.environ, **(env or {})})
    deadline = time.monotonic() + 10
    while len(os.listdir(f"/proc/{proc.pid}/task")) < threads + 1:
        assert time.monotonic() < deadline, "the sleeper's threads did not start"
        time.sleep(0.02)
    return proc


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"
