"""A fault's JSON (gameday/agent/fault.py) and what the agent writes of it: the state
file and the answers, whole and minimal, must be what the JSON encoder writes for the
very objects ``to_json`` and ``minimal`` give. Real: the registry, its state file, the
HTTP answers; the backend is the marker backend (tests/agent/agent_marker.py) or a
stand-in that returns odd details, as a backend may."""

import dataclasses
import enum
import json
import math
import pathlib
import uuid
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gameday.agent.fault import Fault, new_fault_ids, new_faults, plain_details
from gameday.agent.metrics import AgentMetrics
from gameday.agent.registry import FaultRegistry
from gameday.agent.server import _fault_reply, _faults_reply
from gameday.clock import FakeClock
from gameday.contract.backend import FaultRequest
from gameday.lab.devices import VirtualGpuBackend
from gameday.wire.protocol import MINIMAL_FIELDS, REVERT_REASONS
from tests.agent.agent_marker import KIND, MarkerBackend
from tests.json_values import objects, plain

times = st.floats(min_value=0, max_value=2e9) | st.integers(min_value=0, max_value=2**31)


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def compact_answer(value: object) -> bytes:
    return (compact(value) + "\n").encode()


@given(target=objects, params=objects, details=objects, applied=times, lease=times,
       reverted=times, kind=st.text(max_size=10))
def test_every_copy_reads_back_and_its_minimal_answer_is_what_the_encoder_writes(
        target: dict[str, Any], params: dict[str, Any], details: dict[str, Any],
        applied: float, lease: float, reverted: float, kind: str) -> None:
    fault = Fault(id="f-1", kind=kind, target=target, params=params, lease_s=lease,
                  injected_at="process", applied_at=applied, expires_at=applied + lease)
    assert _fault_reply(201, fault).body == compact_answer(fault.to_json())
    active = fault.as_applied(applied + 1, plain_details(details))
    assert active.details == json.loads(compact(details))
    assert (active.applied_at, active.expires_at) == (applied + 1, applied + 1 + lease)
    done = active.as_reverted(reverted, "lease-expired")
    assert (done.reverted_at, done.revert_reason, done.active) == (reverted, "lease-expired",
                                                                    False)
    renewed = dataclasses.replace(active, lease_s=lease + 1, expires_at=applied + lease + 1)
    assert Fault.from_json(json.loads(compact(done.to_json()))) == done
    for copy, outcome in ((active, "applied"), (done, "reverted"), (renewed, "renewed")):
        assert _faults_reply(200, [copy], minimal=outcome).body == compact_answer(
            {"faults": [copy.minimal(outcome)]})  # byte for byte
        assert list(copy.minimal(outcome)) == list(MINIMAL_FIELDS[outcome])
        assert copy.minimal(outcome).items() <= copy.to_json().items()


@given(items=st.lists(st.tuples(st.sampled_from([KIND, 'k"\u00e9']), objects, objects,
                               st.sampled_from([1, 30, 2.5, 3600, 1e-3])), max_size=5),
       applied=times)
def test_a_batchs_new_faults_are_as_their_init_makes_them(
        items: list[tuple[str, dict[str, Any], dict[str, Any], float]], applied: float
        ) -> None:
    requests = [(FaultRequest(kind, target, params), lease)
                for kind, target, params, lease in items]
    layers = {KIND: "process", 'k"\u00e9': "v\u00e9"}
    made = new_faults(requests, layers, applied)
    for fault, (request, lease) in zip(made, requests, strict=True):
        assert fault == Fault(id=fault.id, kind=request.kind, target=dict(request.target),
                              params=dict(request.params), lease_s=lease,
                              injected_at=layers[request.kind], applied_at=applied,
                              expires_at=applied + lease)
        assert fault.target is not request.target  # a copy: the caller may change its own
        assert fault.request == request
    assert len({fault.id for fault in made}) == len(made)


class Level(enum.IntEnum):
    HIGH = 3


class Word(str):
    pass


#: Flat details whose values sit at the edges of what reads back as it was written.
EDGES = [True, False, None, 0, 1, -0.0, 0.1, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 10**30,
         1e308, "\ud800", "", Level.HIGH, Word("w"), math.inf, -math.inf, math.nan]
edges = st.dictionaries(st.text(max_size=3) | st.sampled_from([Word("w")]),
                        st.sampled_from(EDGES), min_size=1, max_size=4)


def same(a: object, b: object) -> bool:
    """Equal and of the same types throughout, in the same order (``==`` takes True for
    1, -0.0 for 0.0 and a subclass of str for str)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict) and isinstance(b, dict):
        return len(a) == len(b) and all(same(ka, kb) and same(va, vb) for (ka, va), (kb, vb)
                                        in zip(a.items(), b.items(), strict=True))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same, a, b))
    return repr(a) == repr(b)


@settings(max_examples=400)
@given(objects | plain | edges | st.dictionaries(st.text(max_size=3), st.integers()
                                                 | st.floats(), max_size=4))
def test_details_are_their_round_trip_through_json(details: Any) -> None:
    expected = json.loads(compact(details), parse_constant=str) if details else {}
    assert same(plain_details(details), expected if isinstance(expected, dict)
                else {"value": expected})


@pytest.mark.parametrize("edge", EDGES, ids=repr)
def test_each_edge_reads_as_its_round_trip(edge: object) -> None:
    for details in ({"k": edge}, {Word("w"): edge}, {"a": 1, "k": edge}):
        assert same(plain_details(details), json.loads(compact(details), parse_constant=str))


def test_details_are_kept_as_they_were_when_the_backend_gave_them() -> None:
    flat: dict[str, Any] = {"gpu": 1}
    nested: dict[str, Any] = {"gpu": [1]}
    kept = [plain_details(flat), plain_details(nested)]
    flat["gpu"] = 2
    nested["gpu"].append(2)  # a backend that changes what it returned, later
    assert kept == [{"gpu": 1}, {"gpu": [1]}]


def test_details_that_cannot_be_written_fail_as_the_backend_returns_them() -> None:
    with pytest.raises(ValueError, match="digits"):  # in the batch's loop: its item fails
        plain_details({"count": 10**5000})
    assert plain_details({"count": 1 << 70}) == {"count": 1180591620717411303424}


def test_odd_details_are_plain_json() -> None:
    odd: list[object] = [None, {}, [1, 2], "text", {"path": pathlib.Path("/x"), 1: (2, 3)}]
    assert [plain_details(value) for value in odd] == [
        {}, {}, {"value": [1, 2]}, {"value": "text"}, {"path": "/x", "1": [2, 3]}]


def test_new_fault_ids_are_distinct_version_4_uuids() -> None:
    ids = new_fault_ids(500)
    assert len(set(ids)) == 500
    for fault_id in ids:
        value = uuid.UUID(fault_id.removeprefix("f-"))
        assert fault_id == f"f-{value.hex}" and value.version == 4
        assert value.variant == uuid.RFC_4122


def test_the_state_file_reads_back_as_the_faults_and_their_states(
        tmp_path: pathlib.Path) -> None:
    registry = FaultRegistry(MarkerBackend(tmp_path / "markers"),
                             state_path=tmp_path / "agent.json", node="n\u00e9-1",
                             clock=FakeClock(start=1_000.5))
    faults = registry.apply_many([(FaultRequest(KIND, {"n": i}, {"reject": None}), 30)
                                  for i in range(3)])
    registry.revert(faults[0].id)
    saved = json.loads(registry.state_path.read_text(encoding="utf-8"))
    assert saved["node"] == "n\u00e9-1" and saved["saved_at"] == 1_000.5
    assert saved["faults"] == [{**f.to_json(), "state": "active"} for f in faults[1:]]


class NanDetails(MarkerBackend):
    """Stand-in for a backend whose details hold a float JSON cannot carry."""

    def apply(self, fault_id: str, request: FaultRequest) -> dict[str, Any]:
        super().apply(fault_id, request)
        return {"ratio": math.nan, "note": "NaN Infinity"}


def test_answers_never_carry_nan_but_words_in_strings_pass(tmp_path: pathlib.Path) -> None:
    """A backend's NaN is kept as a word, so the answers about its fault can be written;
    a fault that held the float itself could not be answered (500), though applied."""
    registry = FaultRegistry(NanDetails(tmp_path / "markers"),
                             state_path=tmp_path / "agent.json", node="n1")
    fault = registry.apply(FaultRequest(KIND, {"n": 1}), 30)
    assert fault.details == {"ratio": "NaN", "note": "NaN Infinity"}
    for reply in (_fault_reply(201, fault), _faults_reply(201, [fault], [])):
        answer = json.loads(reply.body, parse_constant=pytest.fail)
        assert answer in (fault.to_json(), {"faults": [fault.to_json()], "failed": []})
    reply = _faults_reply(201, [fault], minimal="applied")
    assert json.loads(reply.body, parse_constant=pytest.fail) == {
        "faults": [fault.minimal("applied")]}
    assert reply.headers == {"Preference-Applied": "return=minimal"}
    floated = dataclasses.replace(fault, details={"ratio": math.nan})
    with pytest.raises(ValueError, match="Out of range float"):
        _fault_reply(201, floated)  # the agent answers 500, as for any unencodable answer
    with pytest.raises(ValueError, match="Out of range float"):
        _faults_reply(201, [floated], minimal="applied")  # minimal answers too


non_finite = st.sampled_from([math.nan, math.inf, -math.inf])
odd_floats = st.recursive(
    non_finite | st.floats() | st.integers() | st.text(max_size=5) | st.none(),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=12)


@given(odd_floats)
def test_details_never_hold_a_float_json_cannot_write(details: Any) -> None:
    """Over details with NaN and the infinities anywhere: the plain details are their
    round trip through JSON with each of those read as its word, and encode without
    NaN (as every answer must)."""
    plain_value = plain_details(details)
    expected = json.loads(compact(details), parse_constant=str) if details else {}
    assert same(plain_value, expected if isinstance(expected, dict) else {"value": expected})
    json.dumps(plain_value, allow_nan=False)


def metric_values(metrics: AgentMetrics) -> Mapping[str, float]:
    lines = metrics.render().decode().splitlines()
    return {name: float(value) for name, _, value in (line.rpartition(" ") for line in lines)
            if name.startswith("gameday_agent_faults_") and "_total" in name}


def test_a_batch_of_mixed_kinds_counts_each_fault(tmp_path: pathlib.Path) -> None:
    registry = FaultRegistry(VirtualGpuBackend("n0", tmp_path / "gpus", gpus=4),
                             state_path=tmp_path / "agent.json", node="n0")
    kinds = registry.kinds()
    assert metric_values(registry.metrics) == {  # every kind at zero from the start
        **{f'gameday_agent_faults_applied_total{{kind="{kind}"}}': 0.0 for kind in kinds},
        **{f'gameday_agent_faults_reverted_total{{kind="{kind}",reason="{reason}"}}': 0.0
           for kind in kinds for reason in REVERT_REASONS}}
    ecc = {"kind": "single_bit"}
    faults = registry.apply_many([(FaultRequest("gpu.ecc", {"gpu": 0}, ecc), 30),
                                  (FaultRequest("gpu.thermal", {"gpu": 1}), 30),
                                  (FaultRequest("gpu.ecc", {"gpu": 2}, ecc), 30)])
    registry.revert_many([f.id for f in faults])
    assert {name: value for name, value in metric_values(registry.metrics).items()
            if value} == {
        'gameday_agent_faults_applied_total{kind="gpu.ecc"}': 2.0,
        'gameday_agent_faults_applied_total{kind="gpu.thermal"}': 1.0,
        'gameday_agent_faults_reverted_total{kind="gpu.ecc",reason="requested"}': 2.0,
        'gameday_agent_faults_reverted_total{kind="gpu.thermal",reason="requested"}': 1.0,
    }
