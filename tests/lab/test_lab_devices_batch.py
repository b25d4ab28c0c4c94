"""The virtual-GPU backend's batch hook, as the agent's registry drives it.

Stand-in: the GPUs are the lab's virtual GPUs (no NVML here). Real: the published GPU
state files and fault records on disk, the agent registry and its fsync'd state file.
"""

from pathlib import Path
from typing import Any

import pytest

import gameday.lab.devices as devices
from gameday.agent.backend import FaultRequest
from gameday.agent.registry import BatchRejected, FaultRegistry
from gameday.lab.gpustate import GpuState, gpu_state_path, read_gpu_state

ECC = "gpu.ecc"


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every GPU publish (``gpu<i>``) and records save (``records``), in order."""
    seen: list[str] = []
    publish, save = devices.publish_gpu_state, devices.VirtualGpuBackend._save_records

    def counting_publish(state_dir: Path, state: GpuState) -> None:
        seen.append(f"gpu{state.index}")
        publish(state_dir, state)

    def counting_save(self: devices.VirtualGpuBackend) -> None:
        seen.append("records")
        save(self)

    monkeypatch.setattr(devices, "publish_gpu_state", counting_publish)
    monkeypatch.setattr(devices.VirtualGpuBackend, "_save_records", counting_save)
    return seen


def ecc(gpu: int, **params: Any) -> tuple[FaultRequest, float]:
    return FaultRequest(ECC, {"gpu": gpu}, {"kind": "double_bit", **params}), 60.0


def test_a_batch_publishes_each_gpu_touched_once_and_the_records_once(
        tmp_path: Path, writes: list[str]) -> None:
    backend = devices.VirtualGpuBackend("n0", tmp_path / "gpus", gpus=4)
    registry = FaultRegistry(backend, state_path=tmp_path / "agent.json", node="n0")
    writes.clear()
    faults = registry.apply_many([ecc(0), ecc(1), ecc(2)])
    assert writes == ["gpu0", "gpu1", "gpu2", "records"]  # not 3 x (gpu + records)
    published = read_gpu_state(gpu_state_path(tmp_path / "gpus", 1))
    assert published is not None and published != devices.fresh_gpu("n0", 1)
    writes.clear()
    registry.revert_many([f.id for f in faults])
    assert writes == ["gpu0", "gpu1", "gpu2", "records"]
    assert read_gpu_state(gpu_state_path(tmp_path / "gpus", 1)) == devices.fresh_gpu("n0", 1)
    writes.clear()
    registry.apply(*ecc(3))  # one fault alone: published as before
    assert writes == ["gpu3", "records"]


def test_nothing_is_published_until_the_batch_ends_even_when_it_raises(
        tmp_path: Path, writes: list[str]) -> None:
    backend = devices.VirtualGpuBackend("n0", tmp_path / "gpus", gpus=2)
    writes.clear()
    with pytest.raises(RuntimeError), backend.batch():
        backend.apply("f-1", ecc(0)[0])
        with backend.batch():  # re-entrant: the outer batch publishes
            backend.apply("f-2", ecc(1)[0])
        assert writes == []
        raise RuntimeError("the batch failed midway")
    assert writes == ["gpu0", "gpu1", "records"]
    restarted = devices.VirtualGpuBackend("n0", tmp_path / "gpus", gpus=2, fresh=False)
    restarted.revert("f-1", ecc(0)[0])  # the records were saved: a restart can revert
    assert restarted.snapshot()[0] == devices.fresh_gpu("n0", 0)


def test_a_refused_item_rolls_back_and_publishes_the_gpus_as_they_were(
        tmp_path: Path) -> None:
    backend = devices.VirtualGpuBackend("n0", tmp_path / "gpus", gpus=2)
    registry = FaultRegistry(backend, state_path=tmp_path / "agent.json", node="n0")
    with pytest.raises(BatchRejected) as refused:
        registry.apply_many([ecc(0), ecc(1, kind="no-such-kind")])
    assert refused.value.index == 1 and len(refused.value.rolled_back) == 1
    for index in (0, 1):
        assert read_gpu_state(gpu_state_path(tmp_path / "gpus", index)) == \
            devices.fresh_gpu("n0", index)
    assert registry.faults() == []
