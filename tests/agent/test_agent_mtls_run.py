"""``gameday run --target host`` against a real ``gameday agent serve --backend host``
that speaks mutual TLS (certificates made by the test, :mod:`tests.agent.pki`) with a
policy: the run presents its client certificate (``--agent-ca``/``--agent-client-cert``/
``--agent-client-key``), pauses a ``sleep`` process the test started and resumes it; a run
without a client certificate is refused in the handshake and injects nothing."""

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from gameday.errors import AgentError, InvalidInput
from gameday.safety.targetconfig import load_target_config, parse_target_config
from tests.agent.pki import Pki, loopback_san
from tests.conftest import BIN, REPO, cli_env
from tests.host_agent import host_agent

TOKEN = "3f0a6c9e2b5d48e1a7c3f9b2d6e0a4c8f1b5d9e3a7c1f5b9d3e7a1c5f9b3d7e1"


@dataclass
class MtlsAgent:
    url: str
    pki: Pki
    client_cert: Path
    client_key: Path
    audit: Path
    sleeper: subprocess.Popen[bytes]


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[MtlsAgent]:
    pki = Pki(tmp_path)
    cert, key = pki.issue("agent", "agent", loopback_san())
    client_cert, client_key = pki.issue(
        "orchestrator", "orchestrator",
        [x509.UniformResourceIdentifier("spiffe://gameday.test/orchestrator")])
    marker = f"gdmtls-sleeper-{tmp_path.name}"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", marker])
    policy = {"kinds": ["process.pause"], "processes": {"cmdline": [marker]}, "max_active": 4}
    audit = tmp_path / "audit.jsonl"
    try:
        with host_agent(tmp_path, TOKEN, policy, "--tls-cert", str(cert), "--tls-key",
                        str(key), "--tls-client-ca", str(pki.ca_pem), "--audit-log",
                        str(audit), node="gdmtls-host") as (url, proc):
            assert url.startswith("https://127.0.0.1:"), url
            yield MtlsAgent(url, pki, client_cert, client_key, audit, sleeper)
        assert proc.returncode == 0
    finally:
        sleeper.kill()
        sleeper.wait(5)


def _experiment(tmp_path: Path, pid: int) -> Path:
    path = tmp_path / "pause.yaml"
    path.write_text(yaml.safe_dump({
        "version": "1.0.0", "title": "a paused sleeper is resumed",
        "description": "process.pause through an agent that speaks mutual TLS",
        "extensions": [{"name": "gameday", "target": "host", "lease_s": 30}],
        "method": [
            {"type": "action", "name": "pause-sleeper", "provider": {
                "type": "python", "module": "faults.process", "func": "pause",
                "arguments": {"process": {"pid": pid}}}},
            {"type": "probe", "name": "sleeper-is-stopped", "provider": {
                "type": "python", "module": "tests.fixtures.acts", "func": "process_state",
                "arguments": {"pid": pid, "expected": "T"}}}],
        "rollbacks": [{"type": "action", "name": "resume", "provider": {
            "type": "python", "module": "faults.process", "func": "revert"}}]}))
    return path


def _run(tmp_path: Path, agent: MtlsAgent, *tls: str) -> subprocess.CompletedProcess[str]:
    env = {**cli_env(tmp_path), "GAMEDAY_AGENT_URL": agent.url, "GAMEDAY_AGENT_TOKEN": TOKEN}
    return subprocess.run(
        [str(BIN / "gameday"), "run", str(_experiment(tmp_path, agent.sleeper.pid)),
         "--journal-path", str(tmp_path / "journal.json"), *tls],
        cwd=REPO, env=env, text=True, capture_output=True, timeout=120)


def test_a_run_with_a_client_certificate_pauses_and_resumes_through_mutual_tls(
        tmp_path: Path, agent: MtlsAgent) -> None:
    result = _run(tmp_path, agent, "--agent-ca", str(agent.pki.ca_pem), "--agent-client-cert",
                  str(agent.client_cert), "--agent-client-key", str(agent.client_key))
    assert result.returncode == 0, result.stdout + result.stderr
    journal = json.loads((tmp_path / "journal.json").read_text())
    probe = [r for r in journal["run"] if r["activity"]["name"] == "sleeper-is-stopped"]
    assert probe[0]["status"] == "succeeded" and probe[0]["output"] == "T"
    assert _state(agent.sleeper.pid) in ("S", "R")  # resumed by the rollback
    records = [json.loads(line) for line in agent.audit.read_text().splitlines()]
    injected = [r for r in records if r.get("method") == "POST" and r.get("status") == 201]
    assert injected and injected[0]["identity"] == "uri:spiffe://gameday.test/orchestrator"
    reverted = [r for r in records if r.get("status") == 200 and (
        r.get("method") == "DELETE" or r.get("path") == "/v1/faults:batch-revert")]
    assert reverted and reverted[0]["identity"] == injected[0]["identity"]


def test_a_run_without_a_client_certificate_is_refused_and_injects_nothing(
        tmp_path: Path, agent: MtlsAgent) -> None:
    result = _run(tmp_path, agent, "--agent-ca", str(agent.pki.ca_pem))
    assert result.returncode == 2, result.stdout + result.stderr
    assert _state(agent.sleeper.pid) in ("S", "R")
    records = [json.loads(line) for line in agent.audit.read_text().splitlines()] \
        if agent.audit.exists() else []
    assert not any(r.get("method") == "POST" for r in records)


def test_target_configuration_agents_carry_their_tls(
        tmp_path: Path, agent: MtlsAgent, monkeypatch: pytest.MonkeyPatch) -> None:
    token = tmp_path / "client-token"
    token.write_text(TOKEN)
    config = tmp_path / "target.yaml"
    config.write_text(yaml.safe_dump({"agents": [{
        "node": "gdmtls-host", "url": agent.url, "token_file": str(token),
        "ca": str(agent.pki.ca_pem), "client_cert": str(agent.client_cert),
        "client_key": str(agent.client_key)}]}))
    (endpoint,) = load_target_config(config).agents
    assert endpoint.client().health()["node"] == "gdmtls-host"
    bare = parse_target_config({"agents": [{"node": "n", "url": agent.url,
                                            "token_file": str(token)}]})
    with pytest.raises(AgentError):  # no CA, no client certificate
        bare.agents[0].client().health()
    monkeypatch.setenv("GAMEDAY_AGENT_CA", str(agent.pki.ca_pem))
    monkeypatch.setenv("GAMEDAY_AGENT_CLIENT_CERT", str(agent.client_cert))
    monkeypatch.setenv("GAMEDAY_AGENT_CLIENT_KEY", str(agent.client_key))
    assert bare.agents[0].client().health()["node"] == "gdmtls-host"  # from the environment
    with pytest.raises(InvalidInput, match=r"agents\[0\]\.ca"):
        parse_target_config({"agents": [{"node": "n", "url": agent.url, "ca": 3}]})
