"""Nothing secret on the open surface (issue 25, item 5): while faults of each kind this
host can hold are held, every answer that needs no token (``/healthz``, ``/metrics``,
``/openapi.json``, error bodies) is scanned for planted secrets: an environment
selector's values (under a secret-looking key and under a plain one) and the agent's
bearer token. A live agent over mutual TLS, a real process, FUSE and a real namespace."""

import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.security.conftest import TOKEN, LiveAgent, sleeper, unique

PUBLIC = [("GET", "/healthz"), ("GET", "/metrics"), ("GET", "/openapi.json"),
          ("GET", "/v1/faults"), ("GET", "/v1/inventory"), ("GET", "/no/such"),
          ("DELETE", "/metrics"), ("POST", "/v1/faults:check"), ("HEAD", "/metrics")]


def open_answers(agent: LiveAgent) -> list[bytes]:
    """Every answer above, without a token."""
    answers = []
    for method, path in PUBLIC:
        with agent.tls_socket() as sock:
            sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
                         .encode())
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
            answers.append(b"".join(chunks))
    return answers


def test_no_unauthenticated_answer_carries_a_planted_secret(
        tmp_path: Path, agent_with: Callable[..., LiveAgent]) -> None:
    marker = unique("gdsec-env")
    secret, plain = unique("gdsec-secret-value"), unique("gdsec-plain-value")
    data = tmp_path / "data"
    data.mkdir()
    agent = agent_with({"kinds": ["process.pause", "storage.stall", "net.loss"],
                        "paths": [str(data)], "interfaces": ["*"],
                        "processes": {"cmdline": [marker]}})
    env = {"RT_API_TOKEN": secret, "GDSEC_PLAIN": plain, "GDSEC_BEARER": TOKEN}
    proc = sleeper(marker, env=env)
    agent.started.append(proc)
    ns = unique("gdsec-ns")
    subprocess.run(["ip", "netns", "add", ns], check=True, timeout=20)
    held = []
    try:
        with agent.client() as client:
            kinds = client.inventory()["kinds"]
            held.append(client.inject("process.pause", {"env": env}, {}, 30)["kind"])
            if "storage.stall" in kinds:
                held.append(client.inject("storage.stall", {"path": str(data)}, {}, 30)["kind"])
            if "net.loss" in kinds:
                held.append(client.inject("net.loss", {"netns": ns}, {"percent": 10},
                                          30)["kind"])
            answers = open_answers(agent)
            metrics = answers[1].decode()
            for kind in held:
                assert f'kind="{kind}"' in metrics  # the windows are there, redacted
            for answer in answers:
                for planted in (secret, plain, TOKEN):
                    assert planted.encode() not in answer, (planted, answer[:200])
            for fault in client.faults():
                client.revert(fault["id"])
    finally:
        subprocess.run(["ip", "netns", "del", ns], timeout=20)
    assert "process.pause" in held
