"""The virtual-GPU backend's batch hook, as the agent's registry drives it.

Stand-in: the GPUs are the lab's virtual GPUs (no NVML here). Real: the published node
state file (GPUs and fault records) on disk, the agent registry and its fsync'd state file.
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import gameday.lab.devices as devices
from gameday.agent.registry import BatchRejected, FaultRegistry
from gameday.contract.backend import FaultRequest
from gameday.lab.gpustate import GpuState, NodeState, fresh_gpu, node_state_path, read_node_state

ECC = "gpu.ecc"


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every publish of the node state file, as the number of fault records it held."""
    seen: list[int] = []
    publish = devices.publish_node_state

    def counting_publish(state_dir: Path, gpus: Sequence[GpuState],
                         faults: dict[str, Any]) -> None:
        seen.append(len(faults))
        publish(state_dir, gpus, faults)

    monkeypatch.setattr(devices, "publish_node_state", counting_publish)
    return seen


def ecc(gpu: int, **params: Any) -> tuple[FaultRequest, float]:
    return FaultRequest(ECC, {"gpu": gpu}, {"kind": "double_bit", **params}), 60.0


def published(state_dir: Path) -> NodeState:
    state = read_node_state(node_state_path(state_dir))
    assert state is not None
    return state


def test_a_batch_publishes_the_node_state_once(tmp_path: Path, writes: list[int]) -> None:
    backend = devices.VirtualGpuBackend("n0", tmp_path / "gpus", gpus=4)
    registry = FaultRegistry(backend, state_path=tmp_path / "agent.json", node="n0")
    writes.clear()
    faults = registry.apply_many([ecc(0), ecc(1), ecc(2)])
    assert writes == [3]  # not 3 x (gpu + records)
    node = published(tmp_path / "gpus")
    assert node.gpus[1] != fresh_gpu("n0", 1) and node.gpus[3] == backend.snapshot()[3]
    assert node.faults[faults[1].id] == {"kind": ECC, "gpu": 1,
                                         "before": {"ecc_dbe_total": 0}}
    writes.clear()
    registry.revert_many([f.id for f in faults])
    assert writes == [0]
    node = published(tmp_path / "gpus")
    assert [node.gpus[i] for i in range(4)] == [fresh_gpu("n0", i) for i in range(4)]
    writes.clear()
    registry.apply(*ecc(3))  # one fault alone: published as before
    assert writes == [1]


def test_nothing_is_published_until_the_batch_ends_even_when_it_raises(
        tmp_path: Path, writes: list[int]) -> None:
    backend = devices.VirtualGpuBackend("n0", tmp_path / "gpus", gpus=2)
    writes.clear()
    with pytest.raises(RuntimeError), backend.batch():
        backend.apply("f-1", ecc(0)[0])
        with backend.batch():  # re-entrant: the outer batch publishes
            backend.apply("f-2", ecc(1)[0])
        assert writes == []
        raise RuntimeError("the batch failed midway")
    assert writes == [2]
    with backend.batch():
        backend.revert("f-unknown", ecc(0)[0])  # changes nothing: nothing to publish
    assert writes == [2]
    restarted = devices.VirtualGpuBackend("n0", tmp_path / "gpus", gpus=2, fresh=False)
    assert restarted.snapshot() == backend.snapshot()
    restarted.revert("f-1", ecc(0)[0])  # the records were saved: a restart can revert
    assert restarted.snapshot()[0] == fresh_gpu("n0", 0)


def test_a_refused_item_rolls_back_and_publishes_the_gpus_as_they_were(
        tmp_path: Path) -> None:
    backend = devices.VirtualGpuBackend("n0", tmp_path / "gpus", gpus=2)
    registry = FaultRegistry(backend, state_path=tmp_path / "agent.json", node="n0")
    with pytest.raises(BatchRejected) as refused:
        registry.apply_many([ecc(0), ecc(9)])  # no GPU 9: the backend refuses it
    assert refused.value.index == 1 and len(refused.value.rolled_back) == 1
    node = published(tmp_path / "gpus")
    assert node.gpus == {i: fresh_gpu("n0", i) for i in range(2)}
    assert node.faults == {}
    assert registry.faults() == []
