"""The agent over real HTTP (in-process AgentServer on a free port, real AgentClient and
raw http.client), with the marker backend doing real file changes."""

import contextlib
import hmac
import http.client
import json
import pathlib
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gameday.agent.server import AgentServer
from gameday.errors import AgentError
from gameday.wire.agent_client import AgentClient, LeaseLost
from gameday.wire.protocol import MAX_BODY_BYTES
from tests.agent.agent_marker import KIND, MarkerBackend
from tests.waiting import wait_until

TOKEN = "s3cret-token-0123456789"


@pytest.fixture
def backend(tmp_path: pathlib.Path) -> MarkerBackend:
    return MarkerBackend(tmp_path / "markers")


@pytest.fixture
def agent(backend: MarkerBackend, tmp_path: pathlib.Path) -> Iterator[AgentServer]:
    server = AgentServer(backend, token=TOKEN, state_path=tmp_path / "agent.json",
                         node="node-a").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(agent: AgentServer) -> Iterator[AgentClient]:
    with AgentClient(agent.url, TOKEN, timeout_s=5.0) as c:
        yield c


def raw(agent: AgentServer, method: str, path: str, body: bytes | str | None = None,
        token: str | None = TOKEN, headers: dict[str, str] | None = None
        ) -> tuple[int, dict[str, Any], http.client.HTTPResponse]:
    """One request on a fresh connection; returns status, decoded JSON, response."""
    host, port = agent.url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        all_headers = dict(headers or {})
        if token is not None:
            all_headers["Authorization"] = f"Bearer {token}"
        # the agent may answer (413) and close before a large body is all sent
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            conn.request(method, path, body=body, headers=all_headers)
        response = conn.getresponse()
        data = response.read()
        decoded = json.loads(data) if response.getheader("Content-Type", "").startswith(
            "application/json") else {"text": data.decode()}
        return response.status, decoded, response
    finally:
        conn.close()


def inject_body(**overrides: object) -> str:
    body: dict[str, object] = {"kind": KIND, "target": {"gpu": 0}, "params": {},
                               "lease_s": 30}
    body.update(overrides)
    return json.dumps({k: v for k, v in body.items() if v is not ...})


def test_healthz_and_metrics_need_no_token(agent: AgentServer, client: AgentClient) -> None:
    status, body, _ = raw(agent, "GET", "/healthz", token=None)
    assert (status, body) == (200, {"ok": True, "node": "node-a", "backend": "marker"})
    fault = client.inject(KIND, {"gpu": 0}, {}, 30)
    client.revert(fault["id"])
    status, body, response = raw(agent, "GET", "/metrics", token=None)
    assert status == 200 and response.getheader("Content-Type", "").startswith("text/plain")
    text = body["text"]
    assert "gameday_agent_active_faults 0.0" in text
    assert 'gameday_agent_faults_applied_total{kind="test.marker"} 1.0' in text
    assert ('gameday_agent_faults_reverted_total{kind="test.marker",reason="requested"} 1.0'
            in text)


@pytest.mark.parametrize("header", [None, "", "Bearer", f"Bearer {TOKEN}x",
                                    f"Bearer {TOKEN[:-1]}X", f"Basic {TOKEN}", TOKEN])
def test_token_is_required(agent: AgentServer, backend: MarkerBackend,
                           header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header}
    for method, path, body in [("GET", "/v1/inventory", None), ("GET", "/v1/faults", None),
                               ("POST", "/v1/faults", inject_body()),
                               ("DELETE", "/v1/faults/f-x", None),
                               ("GET", "/v1/nowhere", None)]:
        status, answer, response = raw(agent, method, path, body, token=None, headers=headers)
        assert status == 401, (method, path)
        assert answer == {"error": "missing or wrong bearer token"}
        assert response.getheader("WWW-Authenticate", "").startswith("Bearer")
    assert backend.markers() == set()


def test_token_is_compared_in_constant_time(agent: AgentServer,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)  # the server calls hmac.compare_digest
    assert raw(agent, "GET", "/v1/faults", token="wrong")[0] == 401
    assert raw(agent, "GET", "/v1/faults", headers={"authorization": f"bearer {TOKEN}"},
               token=None)[0] == 200
    assert compared == [(b"wrong", TOKEN.encode()), (TOKEN.encode(), TOKEN.encode())]


def test_round_trip(client: AgentClient, backend: MarkerBackend, agent: AgentServer) -> None:
    assert client.health()["node"] == "node-a"
    inventory = client.inventory()
    assert inventory["kinds"] == {KIND: "process"}
    assert (inventory["node"], inventory["backend"]) == ("node-a", "marker")
    assert inventory["gpus"][0]["uuid"] == "GPU-marker-0"
    assert inventory["links"] == [] and inventory["mounts"] == []

    before = time.time()
    fault = client.inject(KIND, {"gpu": 0}, {"fail_reverts": 0}, 30)
    assert backend.markers() == {fault["id"]}
    assert fault["injected_at"] == "process" and fault["lease_s"] == 30
    assert before <= fault["applied_at"] <= time.time()
    assert fault["expires_at"] == pytest.approx(fault["applied_at"] + 30)
    assert fault["reverted_at"] is None and fault["revert_reason"] is None
    assert client.get(fault["id"]) == fault
    assert client.faults() == [fault]

    renewed = client.renew(fault["id"], lease_s=120)
    assert renewed["lease_s"] == 120 and renewed["expires_at"] > fault["expires_at"]
    assert client.renew(fault["id"])["lease_s"] == 120

    done = client.revert(fault["id"])
    assert done["revert_reason"] == "requested" and done["reverted_at"] >= fault["applied_at"]
    assert backend.markers() == set()
    assert client.revert(fault["id"]) == done  # idempotent
    assert backend.reverts == [fault["id"]]
    assert client.faults() == []
    assert client.faults(include_reverted=True) == [done]
    assert client.get(fault["id"]) == done


@pytest.mark.parametrize(("body", "message"), [
    (inject_body(kind="gpu.nope"), "unknown fault kind 'gpu.nope'"),
    (inject_body(lease_s=0), "lease_s must be between 1 and 3600"),
    (inject_body(lease_s=3601), "lease_s must be between 1 and 3600"),
    (inject_body(lease_s="30"), "lease_s must be a number"),
    (inject_body(lease_s=True), "lease_s must be a number"),
    ('{"kind": "test.marker", "target": {}, "lease_s": NaN}', "not valid JSON"),
    ('{"kind": "test.marker", ', "body is not valid JSON"),
    (b"\xff\xfe", "body is not valid JSON"),
    ("[1, 2]", "body must be a JSON object, got array"),
    ('"text"', "body must be a JSON object, got string"),
    ("", "body must be a JSON object"),
    (inject_body(kind=...), "missing field 'kind'"),
    (inject_body(target=...), "missing field 'target'"),
    (inject_body(lease_s=...), "missing field 'lease_s'"),
    (inject_body(kind=7), "kind must be a non-empty string"),
    (inject_body(target=[0]), "target must be a JSON object, got array"),
    (inject_body(params="x"), "params must be a JSON object, got string"),
    (inject_body(lease=30), "unknown field 'lease'"),
    (inject_body(params={"reject": "no such gpu"}), "marker refuses: no such gpu"),
])
def test_bad_inject_is_400(agent: AgentServer, backend: MarkerBackend, body: str | bytes,
                           message: str) -> None:
    status, answer, _ = raw(agent, "POST", "/v1/faults", body)
    assert status == 400
    assert message in answer["error"] and "\n" not in answer["error"]
    assert backend.markers() == set()


def test_bad_renew_is_400(agent: AgentServer, client: AgentClient) -> None:
    fault = client.inject(KIND, {"gpu": 0}, {}, 30)
    for body in ['{"lease_s": 0}', "[]", '{"lease": 5}', "{"]:
        assert raw(agent, "POST", f"/v1/faults/{fault['id']}/renew", body)[0] == 400


def test_oversized_body_is_413(agent: AgentServer, backend: MarkerBackend) -> None:
    body = inject_body(params={"pad": "x" * MAX_BODY_BYTES})
    status, answer, response = raw(agent, "POST", "/v1/faults", body)
    assert status == 413 and "limit of 65536 bytes" in answer["error"]
    assert response.getheader("Connection") == "close"
    assert backend.markers() == set()


def test_duplicate_is_409(client: AgentClient, agent: AgentServer) -> None:
    first = client.inject(KIND, {"gpu": 0}, {}, 30)
    with pytest.raises(AgentError) as caught:
        client.inject(KIND, {"gpu": 0}, {"note": "other"}, 30)
    assert caught.value.status == 409
    assert agent.url in str(caught.value) and first["id"] in str(caught.value)
    assert client.inject(KIND, {"gpu": 1}, {}, 30)["target"] == {"gpu": 1}


def test_unknown_fault_is_404_and_wrong_method_405(agent: AgentServer,
                                                   client: AgentClient) -> None:
    for call in (lambda: client.get("f-nope"), lambda: client.revert("f-nope"),
                 lambda: client.renew("f-nope")):
        with pytest.raises(AgentError, match="no fault 'f-nope'") as caught:
            call()
        assert caught.value.status == 404
    status, _, response = raw(agent, "PUT", "/v1/faults")
    assert status == 405 and response.getheader("Allow") == "GET, POST"
    assert raw(agent, "GET", "/v1/nowhere")[0] == 404


def test_short_lease_expires_for_real(client: AgentClient, backend: MarkerBackend) -> None:
    fault = client.inject(KIND, {"gpu": 0}, {}, 1)
    assert backend.markers() == {fault["id"]}
    wait_until(lambda: not backend.markers(), 2.0, "the markers to go")
    assert time.time() <= fault["expires_at"] + 1.0
    done = client.get(fault["id"])
    assert done["revert_reason"] == "lease-expired"
    assert fault["expires_at"] <= done["reverted_at"] <= fault["expires_at"] + 1.0
    with pytest.raises(LeaseLost) as caught:
        client.renew(fault["id"])
    assert caught.value.status == 410
    assert caught.value.fault["revert_reason"] == "lease-expired"
    assert caught.value.fault["reverted_at"] == done["reverted_at"]


def test_stop_reverts_everything(backend: MarkerBackend, tmp_path: pathlib.Path) -> None:
    server = AgentServer(backend, token=TOKEN, state_path=tmp_path / "a.json", node="n").start()
    client = AgentClient(server.url, TOKEN, timeout_s=2)
    try:
        ids = {client.inject(KIND, {"gpu": i}, {}, 300)["id"] for i in range(3)}
        assert backend.markers() == ids
    finally:
        reverted = server.stop()
    assert backend.markers() == set()
    assert {f.id for f in reverted} == ids
    assert {f.revert_reason for f in reverted} == {"agent-shutdown"}
    assert json.loads((tmp_path / "a.json").read_text())["faults"] == []
    # The kept-alive connection was closed too: the client fails fast, it does not hang.
    with pytest.raises(AgentError, match="connection refused") as caught:
        client.faults()
    assert caught.value.status is None
    client.close()


def test_client_errors_name_the_agent(agent: AgentServer) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free_port = sock.getsockname()[1]
    dead = AgentClient(f"http://127.0.0.1:{free_port}", TOKEN, timeout_s=1)
    with pytest.raises(AgentError, match=f"127.0.0.1:{free_port}.*connection refused") as caught:
        dead.health()
    assert caught.value.status is None
    with pytest.raises(AgentError, match="missing or wrong bearer token") as caught:
        AgentClient(agent.url, "wrong").faults()
    assert caught.value.status == 401 and agent.url in str(caught.value)


def test_client_reconnects_after_the_agent_closes_the_connection(
        agent: AgentServer, client: AgentClient) -> None:
    assert client.faults() == []
    assert client._conn is not None
    sock = client._conn.sock
    assert sock is not None
    sock.shutdown(socket.SHUT_RDWR)  # as if the agent had dropped the idle connection
    assert client.faults() == []
    assert client._conn.sock is not None and client._conn.sock is not sock


def test_timeout_is_agent_error_without_status(tmp_path: pathlib.Path) -> None:
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(AgentError, match=r"no answer within 0\.2s") as caught:
            AgentClient(url, TOKEN, timeout_s=0.2).health()
    assert caught.value.status is None
