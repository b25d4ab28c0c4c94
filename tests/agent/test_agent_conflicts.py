"""The agent's conflict check (gameday/agent/conflicts.py): the same kind on an equal
target, equal as Python compares dicts, found by a dict lookup per fault of a batch.
Real: the registry, its fsync'd state file and the marker backend's files
(tests/agent/agent_marker.py); the index is checked against a plain scan."""

import pathlib
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gameday.agent.conflicts import TargetIndex, first_holder, target_key
from gameday.agent.registry import BatchRejected, FaultConflict, FaultRegistry
from gameday.contract.backend import FaultRequest
from tests.agent.agent_marker import KIND, MarkerBackend


@dataclass(frozen=True, eq=False)  # compared by identity, as the registry's faults are
class Held:
    kind: str
    target: dict[str, Any]


values = st.sampled_from([0, 1, 1.0, True, False, None, "1", "a", 2.5, (1, 2)]) | st.lists(
    st.integers(0, 2), max_size=2)
targets = st.dictionaries(st.sampled_from(["gpu", "node", "link"]), values, max_size=3).map(
    lambda target: dict(reversed(target.items())) if len(target) % 2 else target)
held = st.builds(Held, kind=st.sampled_from(["gpu.ecc", "gpu.oom"]), target=targets)


@given(st.lists(held, max_size=25))
def test_the_index_finds_what_a_scan_of_the_faults_added_before_finds(
        faults: list[Held]) -> None:
    index: TargetIndex[Held] = TargetIndex()
    kept: list[Held] = []
    for fault in faults:
        expected = first_holder(kept, fault.kind, fault.target)
        assert index.add(fault) is expected
        if expected is None:
            kept.append(fault)


def test_targets_are_equal_as_dicts_are() -> None:
    assert target_key({"gpu": 1, "node": "n"}) == target_key({"node": "n", "gpu": 1.0})
    assert target_key({"gpu": True}) == target_key({"gpu": 1})
    assert target_key({"gpu": "1"}) != target_key({"gpu": 1})
    assert target_key({"gpus": [1, 2]}) is None  # compared one by one instead
    index: TargetIndex[Held] = TargetIndex([Held("gpu.ecc", {"gpus": [1, 2]})])
    assert index.add(Held("gpu.ecc", {"gpus": [1, 2]})) is not None
    assert index.add(Held("gpu.ecc", {"gpus": [2, 1]})) is None


@pytest.fixture
def registry(tmp_path: pathlib.Path) -> FaultRegistry:
    return FaultRegistry(MarkerBackend(tmp_path / "markers"),
                         state_path=tmp_path / "agent.json", node="n1")


def test_a_large_batch_names_the_item_that_repeats_an_earlier_one(
        registry: FaultRegistry) -> None:
    items = [(FaultRequest(KIND, {"gpu": i, "node": "n1"}), 30.0) for i in range(600)]
    items.append((FaultRequest(KIND, {"node": "n1", "gpu": 7}), 30.0))  # keys reordered
    with pytest.raises(BatchRejected) as refused:
        registry.apply_many(items)
    assert refused.value.index == 600 and "an earlier item" in str(refused.value)
    assert isinstance(refused.value.cause, FaultConflict)
    assert registry.faults() == [] and registry.backend.applies == []  # type: ignore[attr-defined]
    assert len(registry.apply_many(items[:600])) == 600  # apart, the batch goes through


def test_a_batch_item_on_an_active_faults_target_names_that_fault(
        registry: FaultRegistry) -> None:
    active = registry.apply(FaultRequest(KIND, {"gpu": 3, "node": "n1"}), 30)
    with pytest.raises(BatchRejected) as refused:
        registry.apply_many([(FaultRequest(KIND, {"gpu": 2}), 30),
                             (FaultRequest(KIND, {"node": "n1", "gpu": 3.0}), 30)])
    cause = refused.value.cause
    assert refused.value.index == 1 and isinstance(cause, FaultConflict)
    assert cause.existing.id == active.id and active.id in str(refused.value)
    assert [f.id for f in registry.faults()] == [active.id]
