"""The fault record both ends share (gameday/wire/fault_record.py): every record, the
agent's fault and the ledger's entry read back from the JSON text their ``to_json``
encodes, field for field; the ledger's line keeps its key order. Random values
(hypothesis); the real JSON encoder and decoder."""

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gameday.agent.fault import Fault
from gameday.errors import AgentError
from gameday.evidence.ledger import FaultEntry, FaultEntryJSON, Ledger, agent_inverse
from gameday.wire.fault_record import FaultRecord, FaultRecordJSON
from gameday.wire.protocol import REVERT_REASONS
from tests.json_values import objects

seconds = st.floats(min_value=0, max_value=4e9, allow_nan=False)
words = st.text(max_size=12)


def records(reasons: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    """The fields of a record: active (no end) or reverted for one of ``reasons``."""
    ended = st.one_of(st.tuples(st.none(), st.none()), st.tuples(seconds, reasons))
    return st.builds(
        lambda fields, end: {**fields, "reverted_at": end[0], "revert_reason": end[1]},
        st.fixed_dictionaries({
            "id": words, "kind": words, "target": objects, "params": objects,
            "lease_s": seconds, "injected_at": words, "applied_at": seconds,
            "expires_at": seconds, "details": objects}),
        ended)


def through_json(value: object) -> Any:
    return json.loads(json.dumps(value, separators=(",", ":")))


@given(fields=records(words))
def test_a_record_reads_back_from_its_json_text(fields: dict[str, Any]) -> None:
    record = FaultRecord(**fields)
    data = record.to_json()
    assert list(data) == list(FaultRecordJSON.__annotations__)
    assert FaultRecord.from_json(through_json(data)) == record
    assert record.active is (fields["reverted_at"] is None)


@given(fields=records(st.sampled_from(REVERT_REASONS)))
def test_an_agent_fault_is_a_record_and_reads_back_as_one(fields: dict[str, Any]) -> None:
    fault = Fault(**fields)
    text = through_json(fault.to_json())
    assert Fault.from_json(text) == fault
    assert FaultRecord.from_json(text) == FaultRecord(**fields)


@given(fields=records(words), node=words, url=words, action=words, request_id=words,
       via=st.sampled_from(["agent", "kubernetes"]), inverse=st.dictionaries(words, words))
def test_a_ledger_entry_is_a_record_with_what_only_the_ledger_knows(
        fields: dict[str, Any], node: str, url: str, action: str, request_id: str, via: str,
        inverse: dict[str, str]) -> None:
    if via != "agent":
        fields = {**fields, "details": {**fields["details"], "inverse": inverse}}
    entry = FaultEntry(**fields, node=node, agent_url=url, action=action, via=via,
                       request_id=request_id)
    data = through_json(entry.to_json())
    assert list(data) == ["id", "kind", "node", "agent_url", "target", "params",
                          "injected_at", "applied_at", "expires_at", "lease_s", "action",
                          "reverted_at", "revert_reason", "details", "inverse", "via",
                          "request_id"]  # the ledger's and the journals' order, kept
    assert set(data) == set(FaultEntryJSON.__annotations__)
    assert FaultRecord.from_json(data) == FaultRecord(**fields)
    ledger_only = {"node": node, "agent_url": url, "action": action, "via": via,
                   "request_id": request_id}
    assert FaultEntry(**fields, **ledger_only) == entry
    assert data["inverse"] == (agent_inverse(url, fields["id"]) if via == "agent"
                               else inverse)


@pytest.mark.parametrize("missing", ["id", "kind", "lease_s", "applied_at", "expires_at"])
def test_a_record_without_a_required_key_is_refused_by_name(missing: str) -> None:
    data = dict(FaultRecord("f-1", "gpu.ecc", {}, {}, 30.0, "virtual", 1.0, 31.0).to_json())
    del data[missing]
    with pytest.raises(ValueError, match=f"no '{missing}'"):
        FaultRecord.from_json(data)


def test_absent_optional_keys_read_as_empty() -> None:
    record = FaultRecord.from_json({"id": "f-1", "kind": "gpu.ecc", "lease_s": 30,
                                    "applied_at": 1, "expires_at": 31, "target": None})
    assert record == FaultRecord("f-1", "gpu.ecc", {}, {}, 30.0, "", 1.0, 31.0)


def test_the_agent_refuses_a_record_that_ended_for_a_reason_not_its_own() -> None:
    """The ledger's reasons (``lease-lost``) are records' too; an agent's are its own."""
    data = FaultRecord("f-1", "gpu.ecc", {}, {}, 30.0, "virtual", 1.0, 31.0, 5.0,
                       "lease-lost").to_json()
    assert FaultRecord.from_json(data).revert_reason == "lease-lost"
    with pytest.raises(AgentError, match="unknown revert_reason 'lease-lost'"):
        Fault.from_json(data)
    with pytest.raises(ValueError, match="revert_reason is not a string"):
        FaultRecord.from_json({**data, "revert_reason": 5})


def test_the_ledger_keeps_the_newest_copy_of_an_entry() -> None:
    """An entry is frozen: a renewal or a revert makes a new one, which the ledger holds;
    the entry handed out before is as it was."""
    entry = FaultEntry(id="f-1", kind="gpu.ecc", target={}, params={}, lease_s=30.0,
                       injected_at="virtual", applied_at=1.0, expires_at=31.0,
                       node="node-0", agent_url="http://127.0.0.1:9")
    ledger = Ledger(None, "run-1")
    ledger.record_applied(entry)
    ledger.record_renewed("f-1", 61.0)
    ledger.record_reverted_many([("f-1", 70.0, "lease-lost")])
    [newest] = ledger.entries()
    assert (newest.expires_at, newest.reverted_at, newest.revert_reason) == (
        61.0, 70.0, "lease-lost")
    assert newest == dataclasses.replace(entry, expires_at=61.0, reverted_at=70.0,
                                         revert_reason="lease-lost")
    assert (entry.expires_at, entry.active) == (31.0, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.expires_at = 61.0  # type: ignore[misc]
