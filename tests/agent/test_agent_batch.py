"""Batch calls of the agent API over real HTTP: ``POST /v1/faults:batch`` (all or
nothing), ``:batch-revert`` (idempotent) and ``:batch-renew``, and the lease renewer
using them.

Real: an in-process AgentServer on a free loopback port, the real AgentClient and raw
http.client, the marker backend doing real file changes (a marker file per applied
fault), the agent's fsync'd state file, the orchestrator's ledger. Nothing is a
stand-in here.
"""

import json
import pathlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from gameday.agent.registry import FaultRegistry
from gameday.agent.server import AgentServer
from gameday.agent.state import StateFile
from gameday.clock import FakeClock
from gameday.contract.backend import FaultRequest
from gameday.engine.leases import LeaseRenewer
from gameday.errors import AgentError
from gameday.evidence.ledger import FaultEntry, Ledger
from gameday.wire.agent_client import AgentClient, BatchFailed, LeaseLost
from gameday.wire.protocol import (
    MAX_BATCH_BODY_BYTES,
    MAX_BATCH_ITEMS,
    MINIMAL_FIELDS,
    prefers_minimal,
)
from tests.agent.agent_marker import KIND, MarkerBackend
from tests.agent.state_files import settled
from tests.agent.test_agent_http import raw

TOKEN = "batch-token-0123456789"
BATCH_PATHS = ("/v1/faults:batch", "/v1/faults:batch-revert", "/v1/faults:batch-renew")


class CrashingMarkers(MarkerBackend):
    """Marker files, but applying to GPU ``crash_on`` raises a plain error (a backend
    failure, not a refusal)."""

    crash_on: int | None = None

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        if request.target.get("gpu") == self.crash_on:
            self.marker(fault_id).write_text("half-applied")
            raise RuntimeError("device went away mid-apply")
        return super().apply(fault_id, request)


@pytest.fixture
def backend(tmp_path: pathlib.Path) -> CrashingMarkers:
    return CrashingMarkers(tmp_path / "markers")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def agent(backend: CrashingMarkers, clock: FakeClock, tmp_path: pathlib.Path
          ) -> Iterator[AgentServer]:
    server = AgentServer(backend, token=TOKEN, state_path=tmp_path / "agent.json",
                         node="node-b", clock=clock).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(agent: AgentServer) -> Iterator[AgentClient]:
    with AgentClient(agent.url, TOKEN, timeout_s=10.0) as c:
        yield c


@pytest.fixture
def saves(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> list[int]:
    """How many faults each state write of this test's agent held (one entry per fsync'd
    write; not another test's agent, whose writer may still be finishing)."""
    written: list[int] = []
    real: Callable[..., None] = StateFile.save

    def counting(self: StateFile, faults: Sequence[str], **kw: Any) -> None:
        if self.path.is_relative_to(tmp_path):
            written.append(len(faults))
        real(self, faults, **kw)

    monkeypatch.setattr(StateFile, "save", counting)
    return written


def items(*gpus: int, **params: Any) -> list[dict[str, Any]]:
    return [{"kind": KIND, "target": {"gpu": g}, "params": dict(params), "lease_s": 30}
            for g in gpus]


def test_a_batch_is_applied_with_one_write_and_reverted_with_one(
        client: AgentClient, backend: CrashingMarkers, agent: AgentServer,
        saves: list[int]) -> None:
    faults = client.inject_many(items(*range(16)))
    assert [f["target"] for f in faults] == [{"gpu": g} for g in range(16)]
    assert backend.markers() == {f["id"] for f in faults}
    assert saves[0] == 16  # "applying", on disk before the answer; "active" as it goes out
    state = json.loads(settled(agent.registry.state_path))
    assert {f["state"] for f in state["faults"]} == {"active"}
    assert saves == [16, 16]  # not two writes per fault
    ids = [f["id"] for f in faults]
    first = client.revert_many(ids)
    assert set(first.done) == set(ids) and first.failed == {}
    assert backend.markers() == set() and saves[2:] == [0]
    assert {f["revert_reason"] for f in first.done.values()} == {"requested"}
    again = client.revert_many(ids)  # idempotent: the same records, nothing written
    assert again.done == first.done and saves[2:] == [0]
    assert agent.registry.faults() == []


def test_a_batch_is_saved_before_the_backend_applies_it(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state" / "agent.json"
    seen: list[dict[str, str]] = []

    class Peeking(MarkerBackend):
        def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
            seen.append({f["id"]: f["state"] for f in json.loads(state.read_text())["faults"]})
            return super().apply(fault_id, request)

    backend = Peeking(tmp_path / "markers")
    registry = FaultRegistry(backend, state_path=state, node="n")
    faults = registry.apply_many([(FaultRequest(KIND, {"gpu": g}, {}), 30) for g in range(3)])
    assert seen == [{f.id: "applying" for f in faults}] * 3
    assert len(backend.markers()) == 3
    # the agent dies here (nothing stopped): the next start reverts the whole batch
    again = FaultRegistry(MarkerBackend(tmp_path / "markers"), state_path=state, node="n")
    assert {f.id for f in again.recovered} == {f.id for f in faults}
    assert backend.markers() == set() and again.faults() == []


def test_a_refused_item_reverts_the_items_applied_before_it(
        client: AgentClient, backend: CrashingMarkers, agent: AgentServer) -> None:
    batch = items(0, 1, 2) + items(3, reject="in maintenance") + items(4)
    with pytest.raises(BatchFailed) as refused:
        client.inject_many(batch)
    error = refused.value
    assert (error.status, error.index) == (400, 3)
    assert "faults[3]: marker refuses: in maintenance" in str(error)
    assert error.rolled_back == backend.applies == backend.reverts and len(error.rolled_back) == 3
    assert backend.markers() == set() and agent.registry.faults() == []
    assert json.loads(agent.registry.state_path.read_text())["faults"] == []


def test_a_backend_failure_reverts_the_half_applied_item_too(
        client: AgentClient, backend: CrashingMarkers, agent: AgentServer) -> None:
    backend.crash_on = 2
    with pytest.raises(BatchFailed) as failed:
        client.inject_many(items(0, 1, 2, 3))
    assert (failed.value.status, failed.value.index) == (500, 2)  # may pass: worth a retry
    assert len(backend.reverts) == 3 and backend.markers() == set()
    assert agent.registry.faults() == []
    backend.crash_on = None
    assert len(client.inject_many(items(0, 1, 2, 3))) == 4  # the retry goes through


def test_conflicts_with_active_faults_or_within_the_batch_apply_nothing(
        client: AgentClient, backend: CrashingMarkers, agent: AgentServer) -> None:
    active = client.inject(KIND, {"gpu": 1}, {}, 30)
    status, body, _ = raw(agent, "POST", "/v1/faults:batch",
                          json.dumps({"faults": items(0, 1)}), token=TOKEN)
    assert status == 409 and body["index"] == 1 and body["existing"] == active["id"]
    assert body["rolled_back"] == [] and len(backend.applies) == 1
    status, body, _ = raw(agent, "POST", "/v1/faults:batch",
                          json.dumps({"faults": items(5, 6, 5)}), token=TOKEN)
    assert status == 409 and body["index"] == 2 and "an earlier item" in body["error"]
    assert [f.id for f in agent.registry.faults()] == [active["id"]]
    assert backend.markers() == {active["id"]}


def test_batch_renew_and_revert_answer_per_id(client: AgentClient, agent: AgentServer,
                                               clock: FakeClock) -> None:
    a, b, c = (f["id"] for f in client.inject_many(items(0, 1, 2)))
    client.revert(c)
    clock.advance(10)
    renewed = client.renew_many([a, b, c, "f-nope"], 60)
    assert set(renewed.done) == {a, b}
    assert {f["expires_at"] for f in renewed.done.values()} == {clock.now() + 60}
    assert isinstance(renewed.failed[c], LeaseLost) and renewed.failed[c].status == 410
    assert renewed.failed[c].fault["revert_reason"] == "requested"
    assert renewed.failed["f-nope"].status == 404
    reverted = client.revert_many([a, "f-nope"])
    assert set(reverted.done) == {a} and reverted.failed["f-nope"].status == 404
    assert [f.id for f in agent.registry.faults()] == [b]


def test_batch_answers_are_minimal_when_asked(agent: AgentServer, client: AgentClient,
                                              clock: FakeClock) -> None:
    """``Prefer: return=minimal``: each fault done holds only the fields the agent set,
    with the values of the whole fault; ``Preference-Applied`` says so; failures are
    answered as ever."""
    minimal = {"Prefer": "return=minimal", "Content-Type": "application/json"}
    status, body, response = raw(agent, "POST", "/v1/faults:batch",
                                 json.dumps({"faults": items(0, 1)}), headers=minimal, token=TOKEN)
    assert status == 201 and response.getheader("Preference-Applied") == "return=minimal"
    whole = {f["id"]: f for f in client.faults()}
    assert body["faults"] == [{name: whole[f["id"]][name] for name in MINIMAL_FIELDS["applied"]}
                              for f in body["faults"]]
    assert [list(f) for f in body["faults"]] == [list(MINIMAL_FIELDS["applied"])] * 2
    ids = [f["id"] for f in body["faults"]]
    clock.advance(5)
    status, body, response = raw(agent, "POST", "/v1/faults:batch-renew",
                                 json.dumps({"ids": [ids[0], "f-nope"], "lease_s": 60}),
                                 headers=minimal, token=TOKEN)
    assert status == 200 and response.getheader("Preference-Applied") == "return=minimal"
    assert body["faults"] == [{"id": ids[0], "lease_s": 60, "expires_at": clock.now() + 60}]
    assert [(f["id"], f["status"]) for f in body["failed"]] == [("f-nope", 404)]
    status, body, _ = raw(agent, "POST", "/v1/faults:batch-revert", json.dumps({"ids": ids}),
                          headers=minimal, token=TOKEN)
    assert status == 200 and body["failed"] == []
    assert body["faults"] == [{"id": fault_id, "reverted_at": clock.now(),
                               "revert_reason": "requested"} for fault_id in ids]
    assert agent.registry.faults() == []


def test_without_the_preference_batch_answers_hold_whole_faults(agent: AgentServer) -> None:
    for prefer in (None, "return=representation", "respond-async", "return=minimal-ish"):
        headers = {"Content-Type": "application/json", **({"Prefer": prefer} if prefer else {})}
        status, body, response = raw(agent, "POST", "/v1/faults:batch",
                                     json.dumps({"faults": items(0)}), headers=headers,
                                     token=TOKEN)
        assert status == 201 and response.getheader("Preference-Applied") is None, prefer
        [fault] = body["faults"]
        assert fault["target"] == {"gpu": 0} and fault["kind"] == KIND, prefer
        status, body, _ = raw(agent, "POST", "/v1/faults:batch-revert",
                              json.dumps({"ids": [fault["id"]]}), headers=headers,
                              token=TOKEN)
        assert body["faults"][0]["target"] == {"gpu": 0} and body["failed"] == [], prefer


def test_the_client_asks_for_minimal_answers_when_told(client: AgentClient) -> None:
    faults = client.inject_many(items(0, 1), minimal=True)
    assert [list(f) for f in faults] == [list(MINIMAL_FIELDS["applied"])] * 2
    ids = [f["id"] for f in faults]
    renewed = client.renew_many(ids, 60, minimal=True)
    assert [list(f) for f in renewed.done.values()] == [list(MINIMAL_FIELDS["renewed"])] * 2
    reverted = client.revert_many(ids, minimal=True)
    assert [list(f) for f in reverted.done.values()] == [list(MINIMAL_FIELDS["reverted"])] * 2
    assert {f["revert_reason"] for f in reverted.done.values()} == {"requested"}


@pytest.mark.parametrize(("prefer", "minimal"), [
    ("return=minimal", True), ("RETURN = Minimal", True), ('return="minimal"', True),
    ("respond-async, return=minimal; foo=bar", True), ("wait=5,return=minimal", True),
    ("return=representation, return=minimal", False), ("return=minimalist", False),
    ("returns=minimal", False), ("return", False), ("minimal", False), ("", False),
    (None, False)])
def test_the_prefer_header_is_read_as_rfc_7240_writes_it(prefer: str | None,
                                                         minimal: bool) -> None:
    assert prefers_minimal(prefer) is minimal


def test_batch_calls_need_the_token_and_apply_nothing_without_it(
        agent: AgentServer, backend: CrashingMarkers) -> None:
    body = json.dumps({"faults": items(0), "ids": ["x"]})
    for path in BATCH_PATHS:
        for token in (None, TOKEN + "x"):
            status, _answer, response = raw(agent, "POST", path, body, token=token)
            assert status == 401, (path, token)
            assert response.getheader("WWW-Authenticate") == 'Bearer realm="gameday-agent"'
    assert backend.applies == [] and agent.registry.faults() == []


def test_batch_size_and_shape_bounds(client: AgentClient, agent: AgentServer,
                                     backend: CrashingMarkers) -> None:
    too_many = json.dumps({"faults": items(*range(MAX_BATCH_ITEMS + 1))})
    assert len(too_many) < MAX_BATCH_BODY_BYTES
    status, body, _ = raw(agent, "POST", "/v1/faults:batch", too_many, token=TOKEN)
    assert (status, body["error"]) == (400, "faults must hold 1 to 1024 items, got 1025")
    for bad, message in [
            ({"faults": []}, "faults must hold 1 to 1024 items, got 0"),
            ({"faults": {}}, "faults must be a JSON array, got object"),
            ({"faults": items(0), "x": 1}, "unknown field 'x'; expected faults"),
            ({"faults": [*items(0), {"kind": KIND, "target": {"gpu": 1}}]},
             "faults[1]: missing field 'lease_s'")]:
        status, body, _ = raw(agent, "POST", "/v1/faults:batch", json.dumps(bad), token=TOKEN)
        assert (status, body["error"]) == (400, message)
    for path in BATCH_PATHS[1:]:
        status, body, _ = raw(agent, "POST", path, json.dumps({"ids": ["a", "a"]}), token=TOKEN)
        assert (status, body["error"]) == (400, "ids holds 'a' more than once")
    huge = json.dumps({"faults": items(0, pad="x" * MAX_BATCH_BODY_BYTES)})
    status, body, _ = raw(agent, "POST", "/v1/faults:batch", huge, token=TOKEN)
    assert status == 413 and str(MAX_BATCH_BODY_BYTES) in body["error"]
    status, _, _ = raw(agent, "GET", "/v1/faults:batch", token=TOKEN)
    assert status == 405
    assert backend.applies == []
    with pytest.raises(AgentError, match="1 to 1024 items, got 1025"):
        client.revert_many([f"f-{i}" for i in range(MAX_BATCH_ITEMS + 1)])
    full = client.inject_many(items(*range(MAX_BATCH_ITEMS)))  # the largest batch
    assert len(full) == len(backend.markers()) == MAX_BATCH_ITEMS
    assert set(client.revert_many([f["id"] for f in full]).done) == {f["id"] for f in full}
    assert backend.markers() == set()


def test_the_lease_renewer_renews_an_agents_faults_in_one_request(
        client: AgentClient, agent: AgentServer, clock: FakeClock, tmp_path: pathlib.Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl", "run-batch")
    faults = client.inject_many([{**item, "lease_s": 3} for item in items(0, 1, 2, 3)])
    ledger.record_applied_many([FaultEntry(
        id=f["id"], kind=KIND, node="node-b", agent_url=client.url, target=f["target"],
        params={}, injected_at=f["injected_at"], applied_at=f["applied_at"],
        expires_at=f["expires_at"], lease_s=3) for f in faults])
    client.revert(faults[3]["id"])  # someone reverted one meanwhile
    paths: list[str] = []
    minimal: list[bool] = []
    handle = agent.handle
    monkeypatch.setattr(agent, "handle", lambda request: paths.append(request.path)
                        or minimal.append(request.minimal) or handle(request))
    renewer = LeaseRenewer(ledger, {"node-b": client}, clock=clock)
    renewer.renew_due()
    assert paths == []  # nothing due yet
    clock.advance(2)
    renewer.renew_due()
    assert paths == ["/v1/faults:batch-renew"]
    assert minimal == [True]  # the renewer reads only the new expiry
    assert [e.expires_at for e in ledger.active()] == [clock.now() + 3] * 3
    lost = [e for e in ledger.entries() if not e.active]
    assert [(e.id, e.revert_reason) for e in lost] == [(faults[3]["id"], "lease-lost")]
    renewed = [line for line in (tmp_path / "ledger.jsonl").read_text().splitlines()
               if '"renewed"' in line]
    assert len(renewed) == 3
