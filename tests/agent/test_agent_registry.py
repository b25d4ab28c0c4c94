"""The agent's core (FaultRegistry) without HTTP: leases on a FakeClock, persistence on a
real file, a real backend that creates and deletes marker files."""

import errno
import json
import pathlib
import threading
from typing import Any

import pytest
from structlog.testing import capture_logs

from gameday.agent.registry import (
    AgentClosing,
    Fault,
    FaultConflict,
    FaultGone,
    FaultRegistry,
    RevertFailed,
    UnknownFault,
)
from gameday.agent.state import StateFile
from gameday.clock import FakeClock
from gameday.contract.backend import FaultRequest
from gameday.errors import AgentError, FaultRejected, InvalidInput
from tests.agent.agent_marker import KIND, MarkerBackend
from tests.agent.state_files import settled
from tests.waiting import wait_until


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=1_000.0)


@pytest.fixture
def backend(tmp_path: pathlib.Path) -> MarkerBackend:
    return MarkerBackend(tmp_path / "markers")


@pytest.fixture
def state_path(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "state" / "agent.json"


@pytest.fixture
def registry(backend: MarkerBackend, state_path: pathlib.Path, clock: FakeClock
             ) -> FaultRegistry:
    return FaultRegistry(backend, state_path=state_path, node="n1", clock=clock)


def request(gpu: int = 0, **params: object) -> FaultRequest:
    return FaultRequest(kind=KIND, target={"gpu": gpu}, params=params)


def saved_ids(state_path: pathlib.Path) -> list[str]:
    return [f["id"] for f in json.loads(state_path.read_text())["faults"]]


def test_apply_records_fault_and_persists_it(registry: FaultRegistry, backend: MarkerBackend,
                                             state_path: pathlib.Path) -> None:
    fault = registry.apply(request(fail_reverts=0), 30)
    assert fault.id.startswith("f-")
    assert (fault.kind, fault.target, fault.params) == (KIND, {"gpu": 0}, {"fail_reverts": 0})
    assert fault.injected_at == "process"
    assert (fault.applied_at, fault.expires_at, fault.lease_s) == (1_000.0, 1_030.0, 30)
    assert fault.reverted_at is None and fault.active
    assert fault.details == {"marker": str(backend.marker(fault.id))}
    assert backend.markers() == {fault.id}
    assert saved_ids(state_path) == [fault.id]
    assert registry.faults() == [fault] == [registry.get(fault.id)]
    assert registry.active_count() == 1
    settled(state_path)  # its "active" record, written as the answer went out
    assert [p.name for p in state_path.parent.iterdir()] == ["agent.json"]  # no temp files


@pytest.mark.parametrize("lease", [0, 0.5, 3600.5, -1, float("nan"), True, "30"])
def test_lease_outside_bounds_is_invalid(registry: FaultRegistry, lease: object) -> None:
    with pytest.raises(InvalidInput, match="lease_s"):
        registry.apply(request(), lease)  # type: ignore[arg-type]


def test_unknown_kind_is_invalid_and_names_known_kinds(registry: FaultRegistry) -> None:
    with pytest.raises(InvalidInput, match=r"unknown fault kind 'gpu\.nope'.*test\.marker"):
        registry.apply(FaultRequest(kind="gpu.nope"), 30)


def test_same_kind_on_equal_target_conflicts(registry: FaultRegistry) -> None:
    first = registry.apply(request(gpu=0), 30)
    with pytest.raises(FaultConflict, match=first.id) as caught:
        registry.apply(request(gpu=0, note="params"), 30)
    assert caught.value.existing == first
    registry.apply(request(gpu=1), 30)  # another target is fine
    registry.revert(first.id)
    registry.apply(request(gpu=0), 30)  # and so is the same one once reverted


def test_backend_rejection_leaves_nothing(registry: FaultRegistry, backend: MarkerBackend,
                                          state_path: pathlib.Path) -> None:
    with pytest.raises(FaultRejected, match="marker refuses: no"):
        registry.apply(request(reject="no"), 30)
    assert registry.faults(include_reverted=True) == []
    assert backend.markers() == set() and backend.reverts == []
    assert saved_ids(state_path) == []


def test_revert_is_idempotent(registry: FaultRegistry, backend: MarkerBackend,
                              clock: FakeClock, state_path: pathlib.Path) -> None:
    fault = registry.apply(request(), 30)
    clock.advance(5)
    done = registry.revert(fault.id)
    assert (done.reverted_at, done.revert_reason) == (1_005.0, "requested")
    assert backend.markers() == set()
    clock.advance(5)
    assert registry.revert(fault.id) == done
    assert backend.reverts == [fault.id]
    assert registry.faults() == []
    assert registry.faults(include_reverted=True) == [done]
    assert saved_ids(state_path) == []
    with pytest.raises(UnknownFault):
        registry.revert("f-unknown")


def test_concurrent_reverts_revert_once(registry: FaultRegistry,
                                        backend: MarkerBackend) -> None:
    fault = registry.apply(request(revert_delay_s=0.05), 30)
    results: list[Fault] = []
    threads = [threading.Thread(target=lambda: results.append(registry.revert(fault.id)))
               for _ in range(8)]
    for t in threads:
        t.start()
    registry.revert_all("agent-shutdown")
    for t in threads:
        t.join()
    assert backend.reverts == [fault.id]
    assert len(results) == 8 and len({(r.reverted_at, r.revert_reason) for r in results}) == 1


def test_reap_reverts_expired_leases_only(registry: FaultRegistry, backend: MarkerBackend,
                                          clock: FakeClock) -> None:
    short = registry.apply(request(gpu=0), 1)
    long = registry.apply(request(gpu=1), 10)
    clock.advance(0.99)
    assert registry.reap() == []
    clock.advance(0.01)
    (done,) = registry.reap()
    assert (done.id, done.revert_reason, done.reverted_at) == (short.id, "lease-expired", 1_001.0)
    assert backend.markers() == {long.id}
    assert registry.reap() == []


def test_renew_extends_the_lease(registry: FaultRegistry, clock: FakeClock) -> None:
    fault = registry.apply(request(), 10)
    clock.advance(8)
    renewed = registry.renew(fault.id)
    assert (renewed.expires_at, renewed.lease_s) == (1_018.0, 10)
    renewed = registry.renew(fault.id, 60)
    assert (renewed.expires_at, renewed.lease_s) == (1_068.0, 60)
    clock.advance(59)
    assert registry.reap() == []
    with pytest.raises(InvalidInput):
        registry.renew(fault.id, 0)


def test_renew_after_expiry_is_gone_even_before_the_reaper(
        registry: FaultRegistry, backend: MarkerBackend, clock: FakeClock) -> None:
    fault = registry.apply(request(), 5)
    clock.advance(5)
    with pytest.raises(FaultGone) as caught:
        registry.renew(fault.id)
    assert caught.value.fault.revert_reason == "lease-expired"
    assert caught.value.fault.reverted_at == 1_005.0
    assert backend.markers() == set()
    with pytest.raises(FaultGone):  # still gone, not unknown
        registry.renew(fault.id)
    with pytest.raises(UnknownFault):
        registry.renew("f-unknown")


@pytest.mark.parametrize("killed_with", ["active", "applying"])
def test_restart_reverts_leftovers(backend: MarkerBackend, state_path: pathlib.Path,
                                   clock: FakeClock, killed_with: str) -> None:
    """Whether the agent was killed after its faults' ``active`` record or before it (the
    answer does not wait for that write), a restart reverts them all."""
    first = FaultRegistry(backend, state_path=state_path, node="n1", clock=clock)
    a = first.apply(request(gpu=0), 600)
    b = first.apply(request(gpu=1), 600)
    assert backend.markers() == {a.id, b.id}
    saved = json.loads(settled(state_path))  # the first's writer is done (kill -9 now)
    for fault in saved["faults"]:
        fault["state"] = killed_with
    state_path.write_text(json.dumps(saved))
    clock.advance(3)
    # A new registry on the same file, as after kill -9: leftovers are reverted.
    second = FaultRegistry(backend, state_path=state_path, node="n1", clock=clock)
    assert backend.markers() == set()
    assert {f.id for f in second.recovered} == {a.id, b.id}
    assert second.get(a.id).revert_reason == "agent-restart"
    assert second.get(a.id).reverted_at == 1_003.0
    assert second.faults() == []
    assert saved_ids(state_path) == []
    metrics = second.metrics.render().decode()
    assert ('gameday_agent_faults_reverted_total{kind="test.marker",reason="agent-restart"} 2.0'
            in metrics)


def test_failed_revert_is_retried(registry: FaultRegistry, backend: MarkerBackend,
                                  clock: FakeClock, state_path: pathlib.Path) -> None:
    fault = registry.apply(request(fail_reverts=1), 30)
    with pytest.raises(RevertFailed, match="marker revert failure 1"):
        registry.revert(fault.id)
    assert backend.markers() == {fault.id}
    assert saved_ids(state_path) == [fault.id]  # still held: a restart would revert it
    assert registry.reap() == []  # not before the retry delay
    clock.advance(1)
    (done,) = registry.reap()
    assert (done.id, done.revert_reason) == (fault.id, "requested")
    assert backend.markers() == set()


def test_close_reverts_everything_and_refuses_new_faults(
        registry: FaultRegistry, backend: MarkerBackend) -> None:
    faults = [registry.apply(request(gpu=i), 30) for i in range(3)]
    done = registry.close()
    assert {f.id for f in done} == {f.id for f in faults}
    assert {f.revert_reason for f in done} == {"agent-shutdown"}
    assert backend.markers() == set()
    with pytest.raises(AgentClosing):
        registry.apply(request(), 30)


def test_unreadable_state_file_stops_the_agent(backend: MarkerBackend,
                                               state_path: pathlib.Path) -> None:
    state_path.parent.mkdir(parents=True)
    state_path.write_text("{not json")
    with pytest.raises(AgentError, match="agent state is unreadable"):
        FaultRegistry(backend, state_path=state_path, node="n1")


def test_fault_json_round_trip(registry: FaultRegistry) -> None:
    fault = registry.apply(request(note="\u2713 [1, 2]"), 30)
    assert Fault.from_json(json.loads(json.dumps(fault.to_json()))) == fault
    assert set(fault.to_json()) == {"id", "kind", "target", "params", "lease_s", "injected_at",
                                    "applied_at", "expires_at", "reverted_at",
                                    "revert_reason", "details"}


def test_a_state_write_nobody_waits_for_is_logged_when_it_fails(
        backend: MarkerBackend, state_path: pathlib.Path, clock: FakeClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``active`` record after an apply is not waited for; when its write fails (a
    stand-in: the state file's save raises ENOSPC at its third call, the first after the
    apply), the failure is still logged, the fault stays applied and held, and the next
    change writes the file whole again."""
    real = StateFile.save
    calls: list[int] = []

    def full_at_third(self: StateFile, faults: Any, **kw: Any) -> None:
        if self.path == state_path:  # (not another test's writer, still finishing)
            calls.append(len(faults))
            if len(calls) == 3:  # 1: the start's empty state; 2: "applying"; 3: "active"
                raise OSError(errno.ENOSPC, "No space left on device")
        real(self, faults, **kw)

    monkeypatch.setattr(StateFile, "save", full_at_third)
    with capture_logs() as logs:
        registry = FaultRegistry(backend, state_path=state_path, node="n1", clock=clock)
        fault = registry.apply(request(gpu=0), 30)
        wait_until(lambda: len(calls) >= 3, 10, "the active record's write")
        failed = wait_until(lambda: [e for e in logs if e["event"] == "state.save_failed"],
                            10, "the failure logged")
    assert len(failed) == 1 and "No space left on device" in failed[0]["error"]
    assert backend.markers() == {fault.id} and registry.faults() == [fault]
    assert [f["state"] for f in json.loads(state_path.read_text())["faults"]] == ["applying"]
    registry.revert(fault.id)  # the next write, waited for, carries the whole state
    assert saved_ids(state_path) == [] and backend.markers() == set()
