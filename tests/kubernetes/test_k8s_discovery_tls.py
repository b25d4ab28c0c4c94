"""Kubernetes discovery with TLS configured: agent URLs are https, the agents'
certificate is checked for ``gameday-agent.NAMESPACE.svc`` (not the pod IP), and the
client certificate is presented (mutual TLS).

Stand-ins: the Kubernetes API (gameday/testing/kube.py over real HTTP, through the REAL
client) and the GPUs (the lab's virtual GPUs). Real: an in-process agent serving TLS 1.3
with mutual TLS on loopback, certificates made by the test (:mod:`tests.agent.pki`)."""

from pathlib import Path

import pytest
from cryptography import x509

from gameday.agent.server import AgentServer
from gameday.errors import TargetUnavailable
from gameday.lab.devices import VirtualGpuBackend
from gameday.targets.kubernetes.discovery import agent_server_name
from gameday.targets.kubernetes.target import kubernetes_target
from gameday.testing.kube import running_standin
from gameday.wire.tls import ServerTLS
from tests.agent.pki import Pki
from tests.kubernetes.k8s_cluster import AGENT_TOKEN, NAMESPACE, api_configuration, register_agent


def test_discovery_reaches_mutual_tls_agents_over_https(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    cert, key = pki.issue("agent", "agent", [x509.DNSName(agent_server_name(NAMESPACE))])
    client_cert, client_key = pki.issue("orch", "orchestrator", [])
    backend = VirtualGpuBackend("gpu-tls", tmp_path / "gpus", gpus=2)
    with AgentServer(backend, token=AGENT_TOKEN, state_path=tmp_path / "agent.json",
                     node="gpu-tls", tls=ServerTLS(cert, key, pki.ca_pem)) as server, \
            running_standin() as api:
        register_agent(api, "gpu-tls", server.url)
        api.add_secret(NAMESPACE, "gameday-agent-token", {"token": AGENT_TOKEN})
        tls = {"agent_ca": str(pki.ca_pem), "agent_client_cert": str(client_cert),
               "agent_client_key": str(client_key)}
        target = kubernetes_target(api_configuration(api, **tls))
        assert target.agents["gpu-tls"].url.startswith("https://127.0.0.1:")
        assert [g.index for g in target.gpus() if g.node == "gpu-tls"] == [0, 1]
        without_cert = {"agent_ca": str(pki.ca_pem)}
        with pytest.raises(TargetUnavailable):  # refused in the handshake
            kubernetes_target(api_configuration(api, **without_cert))
        wrong_name = {**tls, "agent_tls_server_name": "someone-else.example"}
        with pytest.raises(TargetUnavailable):
            kubernetes_target(api_configuration(api, **wrong_name))
