"""The audit trail's group commit, as a property over random batches: a batch's apply
(and revert) records are written together with one ``fsync`` before its first change,
and at every change the audit FILE (read from disk, not from the writer) already holds
that fault's record; a batch that fails part way leaves nothing applied, each rollback
revert recorded before it happens. A batch whose records cannot be written applies
nothing.

The backend is the tests' marker backend (a file per applied fault): no real mechanism
is needed to see the order of records and changes."""

import json
import pathlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gameday.agent.audit import AuditTrail, AuditUnavailable
from gameday.agent.audited import AuditedBackend
from gameday.agent.registry import BatchRejected, FaultRegistry
from gameday.contract.backend import FaultRequest
from tests.agent.agent_marker import KIND, MarkerBackend


class Watching(MarkerBackend):
    """The marker backend, checking at each change that the audit file holds its record."""

    def __init__(self, directory: pathlib.Path, audit: pathlib.Path) -> None:
        super().__init__(directory)
        self.audit = audit
        self.order: list[tuple[str, str]] = []

    def on_disk(self, phase: str, fault_id: str) -> bool:
        return any(r.get("phase") == phase and r.get("fault_id") == fault_id
                   for r in map(json.loads, self.audit.read_text().splitlines()))

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        assert self.on_disk("apply", fault_id), f"{fault_id} applied before its record"
        self.order.append(("apply", fault_id))
        return super().apply(fault_id, request)

    def revert(self, fault_id: str, request: FaultRequest) -> None:
        assert self.on_disk("revert", fault_id), f"{fault_id} reverted before its record"
        self.order.append(("revert", fault_id))
        super().revert(fault_id, request)


class Counting(AuditTrail):
    def __init__(self, path: pathlib.Path) -> None:
        super().__init__(path)
        self.writes: list[list[str]] = []

    def write_many(self, entries: Any) -> None:
        self.writes.append([str(entry.get("phase")) for entry in entries])
        super().write_many(entries)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(1, 24), refused_at=st.one_of(st.none(), st.integers(0, 23)))
def test_a_batch_is_recorded_in_one_write_before_its_first_change(
        tmp_path_factory: pytest.TempPathFactory, size: int, refused_at: int | None) -> None:
    root = tmp_path_factory.mktemp("group")
    audit = Counting(root / "audit.jsonl")
    backend = Watching(root / "markers", audit.path)
    registry = FaultRegistry(AuditedBackend(backend, audit), state_path=root / "agent.json",
                             node="n1")
    refused = refused_at if refused_at is not None and refused_at < size else None
    items = [(FaultRequest(KIND, {"gpu": i}, {"reject": "no"} if i == refused else {}), 30.0)
             for i in range(size)]
    try:
        if refused is None:
            faults = registry.apply_many(items)
            assert len(faults) == size and len(backend.markers()) == size
            assert audit.writes == [["apply"] * size]  # one write, one fsync
            audit.writes.clear()
            registry.revert_many([f.id for f in faults])
            assert audit.writes == [["revert"] * size]
        else:
            with pytest.raises(BatchRejected) as rejected:
                registry.apply_many(items)
            assert rejected.value.index == refused
            assert backend.markers() == set()  # nothing of the batch stays applied
            assert audit.writes[0] == ["apply"] * size  # every item's record, ahead
            applied = [fault_id for phase, fault_id in backend.order if phase == "apply"]
            reverted = [fault_id for phase, fault_id in backend.order if phase == "revert"]
            assert sorted(reverted) == sorted(applied[:refused])
    finally:
        registry.revert_all("requested")
        audit.close()


def test_a_batch_whose_records_cannot_be_written_applies_nothing(
        tmp_path: pathlib.Path) -> None:
    audit = AuditTrail(tmp_path / "audit.jsonl")
    backend = MarkerBackend(tmp_path / "markers")
    registry = FaultRegistry(AuditedBackend(backend, audit), state_path=tmp_path / "agent.json",
                             node="n1")
    audit.close()
    (tmp_path / "audit.jsonl").unlink()
    (tmp_path / "audit.jsonl").mkdir()  # the path cannot be reopened as a file
    with pytest.raises((BatchRejected, AuditUnavailable)):
        registry.apply_many([(FaultRequest(KIND, {"gpu": i}), 30.0) for i in range(4)])
    assert backend.applies == [] and backend.markers() == set()
