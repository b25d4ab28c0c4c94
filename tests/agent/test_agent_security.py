"""The agent's security: TLS 1.3 and mutual TLS with certificates the test makes
(``cryptography``), certificate reload, several tokens and their rotation, weak tokens
and readable token files refused, the audit trail, the registry's caps, slow-header
clients, deep bodies; all over real sockets on loopback."""

import json
import os
import pathlib
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from cryptography import x509

from gameday.agent.audit import AuditTrail
from gameday.agent.registry import Limits
from gameday.agent.server import AgentServer
from gameday.errors import AgentError, InvalidInput
from gameday.wire.agent_client import AgentClient
from gameday.wire.tls import ServerTLS, client_context
from gameday.wire.tokens import TokenSet, check_token, token_bits
from tests.agent.agent_marker import KIND, REPO, MarkerBackend
from tests.agent.pki import Pki
from tests.waiting import wait_until

TOKEN = "7d1c0b9a3e5f46a8b2c4d6e8f0a1b3c5d7e9f1a3b5c7d9e1f3a5b7c9d1e3f5a7"
OTHER = "0f9e8d7c6b5a49382716a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4"


@pytest.fixture
def pki(tmp_path: pathlib.Path) -> Pki:
    return Pki(tmp_path)


def _server_files(pki: Pki) -> tuple[pathlib.Path, pathlib.Path]:
    import ipaddress
    return pki.issue("server", "agent", [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])


@pytest.fixture
def mtls_agent(tmp_path: pathlib.Path, pki: Pki) -> Iterator[AgentServer]:
    cert, key = _server_files(pki)
    server = AgentServer(MarkerBackend(tmp_path / "markers"), token=TOKEN,
                         state_path=tmp_path / "state.json", node="tls-node",
                         tls=ServerTLS(cert, key, pki.ca_pem),
                         audit=AuditTrail(tmp_path / "audit" / "audit.jsonl"))
    with server:
        yield server


def test_mutual_tls_lets_in_only_a_client_with_a_certificate(
        tmp_path: pathlib.Path, pki: Pki, mtls_agent: AgentServer) -> None:
    assert mtls_agent.url.startswith("https://127.0.0.1:")
    client_cert, client_key = pki.issue("client", "orchestrator",
                                        [x509.UniformResourceIdentifier("spiffe://gd/orch")])
    good = client_context(pki.ca_pem, client_cert, client_key)
    with AgentClient(mtls_agent.url, TOKEN, tls=good) as client:
        fault = client.inject(KIND, {"gpu": 0}, {"note": "x", "api_token": "s3cr3t"}, 30)
        client.revert(fault["id"])
    with AgentClient(mtls_agent.url, TOKEN, tls=client_context(pki.ca_pem)) as client, \
            pytest.raises(AgentError):
        client.health()  # no client certificate: the handshake fails
    with AgentClient(mtls_agent.url, TOKEN) as client, pytest.raises(AgentError):
        client.health()  # the system CAs do not know the test CA
    plain = socket.create_connection(("127.0.0.1", int(mtls_agent.url.rsplit(":", 1)[1])))
    plain.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        answer = plain.recv(100)
    except ConnectionResetError:
        answer = b""
    assert not answer.startswith(b"HTTP/1.1")  # cleartext gets no HTTP answer
    plain.close()
    records = [json.loads(line) for line in
               (tmp_path / "audit" / "audit.jsonl").read_text().splitlines()]
    injected = next(r for r in records if r.get("method") == "POST"
                    and r["phase"] == "outcome")
    assert injected["identity"] == "uri:spiffe://gd/orch"
    assert injected["token"].startswith("token:") and TOKEN not in json.dumps(records)
    assert injected["path"] == "/v1/faults:batch" and injected["status"] == 201
    [item] = injected["faults"]  # the client's single inject is a batch of one
    assert item["kind"] == KIND and item["params"] == {"note": "x", "api_token": "[redacted]"}
    assert any(r.get("method") == "DELETE" and r["status"] == 200 for r in records)
    # each change came after its record: intent, apply, outcome; intent, revert, outcome
    assert [r["phase"] for r in records if r["phase"] != "unauthenticated"] == [
        "intent", "apply", "outcome", "intent", "revert", "outcome"]


def test_each_connection_is_recorded_as_its_own_clients_identity(
        tmp_path: pathlib.Path, pki: Pki, mtls_agent: AgentServer) -> None:
    """The identity is read once per connection: two clients, each kept alive over its
    requests and taking turns, are each recorded as themselves on every record, and
    each request's records keep that request's body."""
    names = ("spiffe://gd/alice", "spiffe://gd/bob")
    clients = [AgentClient(mtls_agent.url, TOKEN, tls=client_context(
        pki.ca_pem, *pki.issue(f"client-{i}", f"orch-{i}",
                               [x509.UniformResourceIdentifier(name)])))
               for i, name in enumerate(names)]
    with clients[0], clients[1]:
        for turn in range(3):
            for client in clients:
                client.revert(client.inject(KIND, {"gpu": turn}, {"note": "x"}, 30)["id"])
    records = [json.loads(line) for line in
               (tmp_path / "audit" / "audit.jsonl").read_text().splitlines()]
    by_request = [r for r in records if r.get("method") in ("POST", "DELETE")]
    assert len(by_request) == 2 * 3 * 2 * 2  # intent and outcome of each request
    expected = [f"uri:{name}" for _ in range(3) for name in names for _ in range(4)]
    assert [r["identity"] for r in by_request] == expected
    # each request's records keep its own body (made once for its intent and outcome,
    # never carried to the next request on the connection)
    injects = [r for r in by_request if r["method"] == "POST"]
    assert [r["faults"][0]["target"] for r in injects] == [
        {"gpu": turn} for turn in range(3) for _ in names for _ in ("intent", "outcome")]
    assert all("faults" not in r for r in by_request if r["method"] == "DELETE")


def test_tls_below_1_3_is_refused(pki: Pki, mtls_agent: AgentServer) -> None:
    context = ssl.create_default_context(cafile=str(pki.ca_pem))
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    port = int(mtls_agent.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as raw, pytest.raises(ssl.SSLError):
        context.wrap_socket(raw, server_hostname="127.0.0.1")


def test_a_renewed_certificate_is_served_without_a_restart(
        tmp_path: pathlib.Path, pki: Pki) -> None:
    cert, key = _server_files(pki)
    tls = ServerTLS(cert, key)
    with AgentServer(MarkerBackend(tmp_path / "m"), token=TOKEN, node="n",
                     state_path=tmp_path / "s.json", tls=tls) as server:
        with AgentClient(server.url, TOKEN, tls=client_context(pki.ca_pem)) as client:
            assert client.health()["ok"]
        other = Pki(tmp_path, "ca2")
        import ipaddress
        new_cert, _ = other.issue("server", "agent",  # over the files served
                                        [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        os.utime(new_cert, (time.time() + 5, time.time() + 5))
        deadline = time.monotonic() + 10
        while True:  # the reload happens on the first connection after a second
            try:
                with AgentClient(server.url, TOKEN, tls=client_context(other.ca_pem)) as c:
                    assert c.health()["ok"]
                break
            except AgentError:
                assert time.monotonic() < deadline, "the new certificate was never served"
                time.sleep(0.2)
        with AgentClient(server.url, TOKEN, tls=client_context(pki.ca_pem)) as client, \
                pytest.raises(AgentError):
            client.health()  # the old CA's certificate is gone


def test_two_tokens_at_once_and_a_rotation_by_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"# rotation\n{TOKEN}\n{OTHER}\n")
    path.chmod(0o600)
    with AgentServer(MarkerBackend(tmp_path / "m"), token=TokenSet(path=path), node="n",
                     state_path=tmp_path / "s.json") as server:
        for token in (TOKEN, OTHER):
            with AgentClient(server.url, token) as client:
                assert client.inventory()["node"] == "n"
        path.write_text(f"{OTHER}\n")  # the old token retired
        os.utime(path, (time.time() + 5, time.time() + 5))
        time.sleep(1.1)
        with AgentClient(server.url, TOKEN) as client, pytest.raises(AgentError) as refused:
            client.inventory()
        assert refused.value.status == 401
        with AgentClient(server.url, OTHER) as client:
            assert client.inventory()["node"] == "n"


@pytest.mark.parametrize("token", ["x", "secret-token-42", "a" * 200, "ab" * 100,
                                   "0123456789" * 5])
def test_weak_tokens_are_refused(token: str) -> None:
    assert token_bits(token) < 256
    with pytest.raises(InvalidInput, match="too weak"):
        check_token(token, "test")


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gameday.agent.serve", *args],
                          env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_the_cli_refuses_weak_tokens_open_files_and_plaintext_off_loopback(
        tmp_path: pathlib.Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("short\n")
    token_file.chmod(0o600)
    base = ["--backend", "tests.agent.agent_marker:factory", "--state-dir",
            str(tmp_path / "state"), "--token-file", str(token_file)]
    done = _serve(*base, "--listen", "127.0.0.1:0")
    assert done.returncode == 2 and "too weak" in done.stderr
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o644)
    done = _serve(*base, "--listen", "127.0.0.1:0")
    assert done.returncode == 2 and "chmod 600" in done.stderr
    token_file.chmod(0o600)
    done = _serve(*base, "--listen", "0.0.0.0:0")
    assert done.returncode == 2 and "--insecure-plaintext" in done.stderr


def test_caps_on_active_faults_lease_and_lifetime(tmp_path: pathlib.Path) -> None:
    limits = Limits(kinds=frozenset({KIND}), lease_max_s=60, lifetime_max_s=50, max_active=2,
                    source="the test policy")
    with AgentServer(MarkerBackend(tmp_path / "m"), token=TOKEN, node="n",
                     state_path=tmp_path / "s.json", limits=limits) as server, \
            AgentClient(server.url, TOKEN) as client:
        with pytest.raises(AgentError) as too_long:
            client.inject(KIND, {"gpu": 0}, {}, 61)
        assert too_long.value.status == 403
        first = client.inject(KIND, {"gpu": 0}, {}, 40)
        client.inject(KIND, {"gpu": 1}, {}, 40)
        with pytest.raises(AgentError) as full:
            client.inject(KIND, {"gpu": 2}, {}, 40)
        assert full.value.status == 429 and "allows 2 at once" in str(full.value)
        client.renew(first["id"], 40)  # about 40 s in all: fine
        with pytest.raises(AgentError) as lifetime:
            client.renew(first["id"], 60)  # 60 s from now is over 50 s in all
        assert lifetime.value.status == 403 and "in all" in str(lifetime.value)


def test_a_slow_header_client_is_cut_off_and_health_keeps_answering(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gameday.agent import server as server_module
    monkeypatch.setattr(server_module, "REQUEST_DEADLINE_S", 0.5)
    with AgentServer(MarkerBackend(tmp_path / "m"), token=TOKEN, node="n",
                     state_path=tmp_path / "s.json", per_source=4) as server:
        port = int(server.url.rsplit(":", 1)[1])
        slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        for conn in slow:
            conn.sendall(b"GET /healthz HTTP/1.1\r\n")  # and never the rest
        with AgentClient(server.url, TOKEN) as client:
            assert client.health()["ok"]
        for conn in slow:
            conn.settimeout(5)
            assert conn.recv(100) == b""  # closed by the deadline, not by the client
            conn.close()
        httpd = server._httpd  # its counts of what it serves, read to wait without a sleep
        wait_until(lambda: sum(httpd._sources.values()) == 0, 10, "the slow ones released")
        crowd = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
        wait_until(lambda: httpd._sources.get("127.0.0.1") == 4, 10, "the crowd served")
        on_slot = socket.create_connection(("127.0.0.1", port))  # its health slot
        wait_until(lambda: len(httpd._health_slots) == 1, 10, "the health slot taken")
        extra = socket.create_connection(("127.0.0.1", port))
        extra.settimeout(5)
        assert extra.recv(200).startswith(b"HTTP/1.1 503")  # over the per-source cap
        on_slot.sendall(b"GET /v1/inventory HTTP/1.1\r\nHost: x\r\n\r\n")
        on_slot.settimeout(5)
        assert on_slot.recv(200).startswith(b"HTTP/1.1 503")  # a slot answers health only
        for conn in [*crowd, on_slot, extra]:
            conn.close()


def test_a_deep_body_and_a_bad_parameter_answer_4xx(tmp_path: pathlib.Path) -> None:
    with AgentServer(MarkerBackend(tmp_path / "m"), token=TOKEN, node="n",
                     state_path=tmp_path / "s.json") as server:
        port = int(server.url.rsplit(":", 1)[1])
        body = b"[" * 30000 + b"]" * 30000
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(b"POST /v1/faults HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                         + TOKEN.encode() + b"\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)
            answer = conn.recv(300)
        assert answer.startswith(b"HTTP/1.1 400"), answer


def test_health_answers_when_every_connection_slot_is_busy(tmp_path: pathlib.Path) -> None:
    """Two idle connections fill both slots; ``GET /healthz`` is still answered (on a
    health slot, one per source), anything else ``503``; a client holding the health
    slot without sending is cut off after its deadline, and health answers again."""
    with AgentServer(MarkerBackend(tmp_path / "m"), token=TOKEN, node="n",
                     state_path=tmp_path / "s.json", max_connections=2,
                     per_source=2) as server:
        port = int(server.url.rsplit(":", 1)[1])
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        slots = server._httpd._health_slots  # read to wait until a slot is free again

        def free() -> bool:
            return not slots

        with AgentClient(server.url, TOKEN) as client:
            wait_until(lambda: _health_status(port) == 200)  # the idle ones are accepted
            wait_until(free, 10, "the health slot free")
            assert client.health()["ok"]
            wait_until(free, 10, "the health slot free")
            with pytest.raises(AgentError) as busy:
                client.inject(KIND, {"gpu": 0}, {}, 30)
            assert busy.value.status == 503 and "only GET /healthz" in str(busy.value)
            wait_until(free, 10, "the health slot free")
            holder = _hold_health_slot(port)
            assert _health_status(port) == 503  # no slot left for this source
            holder.settimeout(10)
            assert holder.recv(100) == b""  # cut off by the slot's deadline
            wait_until(free, 10, "the health slot free")
            assert client.health()["ok"]
        for conn in [*idle, holder]:
            conn.close()
        assert MarkerBackend(tmp_path / "m").markers() == set()


def _hold_health_slot(port: int) -> socket.socket:
    """A connection that holds this source's health slot, sending nothing (the slot of
    a connection just answered may take a moment to be free: then it is retried)."""
    for _ in range(50):
        holder = socket.create_connection(("127.0.0.1", port))
        holder.settimeout(0.2)
        try:
            if holder.recv(100).startswith(b"HTTP/1.1 503"):  # no slot yet: busy
                holder.close()
                continue
        except TimeoutError:
            return holder  # nothing answered: it sits on the slot
        holder.close()
    raise AssertionError("the health slot never came free")


def _health_status(port: int) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        head = conn.recv(200)
    return int(head.split()[1]) if head.startswith(b"HTTP/1.1 ") else 0
