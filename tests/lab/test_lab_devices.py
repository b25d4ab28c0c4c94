"""The virtual backend: gpu.ecc validation, apply, idempotent revert, published state."""

import json
import time
from pathlib import Path
from typing import Any

import pytest

from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.lab.devices import VirtualGpuBackend
from gameday.lab.gpustate import (
    GPU_FIELDS,
    GpuStateWatcher,
    fresh_gpu,
    gpu_uuid,
    node_state_path,
)
from gameday.lab.shard import gpu_fault, out_of_memory


def ecc(gpu: Any = 0, **params: Any) -> FaultRequest:
    return FaultRequest("gpu.ecc", {"gpu": gpu}, params)


@pytest.fixture
def backend(tmp_path: Path) -> VirtualGpuBackend:
    return VirtualGpuBackend("node-0", tmp_path, gpus=4)


def test_inventory_and_kinds(backend: VirtualGpuBackend) -> None:
    inv = backend.inventory()
    assert inv["node"] == "node-0" and len(inv["gpus"]) == 4
    assert inv["gpus"][1] == {"index": 1, "uuid": gpu_uuid("node-0", 1),
                              "name": "NVIDIA H100 80GB HBM3 (virtual)", "memory_mib": 81559,
                              "nvlink_domain": "node-0"}
    assert inv["gpus"][0]["uuid"].startswith("GPU-") and len(inv["gpus"][0]["uuid"]) == 40
    assert backend.kinds() == {kind: "virtual" for kind in (
        "gpu.ecc", "gpu.oom", "gpu.memory_leak", "gpu.xid", "gpu.thermal", "gpu.fall_off_bus")}


@pytest.mark.parametrize(("request_", "names"), [
    (ecc(7, kind="double_bit"), "target.gpu"),
    (ecc("0", kind="double_bit"), "target.gpu"),
    (ecc(True, kind="double_bit"), "target.gpu"),
    (FaultRequest("gpu.ecc", {}, {"kind": "double_bit"}), "target.gpu"),
    (FaultRequest("gpu.ecc", {"gpu": 0, "node": "x"}, {"kind": "double_bit"}), "'node'"),
    (ecc(kind="triple_bit"), "params.kind"),
    (ecc(kind=None), "params.kind"),
    (ecc(kind="double_bit", count=-1), "params.count"),
    (ecc(kind="double_bit", count=1_000_001), "params.count"),
    (ecc(kind="double_bit", count=1.5), "params.count"),
    (ecc(kind="double_bit", count=True), "params.count"),
    (ecc(kind="double_bit", xid=79), "params.xid"),
    (ecc(kind="double_bit", corrupt_weights="yes"), "params.corrupt_weights"),
    (ecc(kind="double_bit", count=0), "params.count"),
    (ecc(kind="double_bit", colour="red"), "params.colour"),
    (FaultRequest("gpu.melt", {"gpu": 0}, {}), "gpu.melt"),
])
def test_invalid_requests_are_rejected_naming_the_parameter(
        backend: VirtualGpuBackend, request_: FaultRequest, names: str) -> None:
    before = backend.snapshot()
    with pytest.raises(FaultRejected) as info:
        backend.apply("f-1", request_)
    message = str(info.value)
    assert names in message and "\n" not in message
    assert backend.snapshot() == before


def test_apply_then_revert_restores_the_gpu(backend: VirtualGpuBackend,
                                            tmp_path: Path) -> None:
    watcher = GpuStateWatcher(node_state_path(tmp_path), 2)
    assert watcher.current() == backend.snapshot()[2]
    untouched = backend.snapshot()
    backend.apply("f-sbe", ecc(2, kind="single_bit", count=5))
    details = backend.apply("f-dbe", FaultRequest("gpu.ecc", {"gpu": 3},
                                                  {"kind": "double_bit", "xid": 48}))
    assert details["ecc_dbe_total"] == 1 and details["xid"] == 48
    state = backend.snapshot()[3]
    assert (state.ecc_dbe_total, state.last_xid) == (1, 48)
    seen = watcher.current()
    assert seen is not None and seen.ecc_sbe_total == 5
    backend.revert("f-dbe", ecc(3))
    backend.revert("f-dbe", ecc(3))  # idempotent
    backend.revert("f-unknown", ecc(3))
    assert backend.snapshot()[3] == untouched[3]
    assert backend.snapshot()[2].ecc_sbe_total == 5
    backend.revert("f-sbe", ecc(2))
    assert backend.snapshot() == untouched
    assert watcher.current() == untouched[2]


def test_corruption_only_and_xid_only_faults(backend: VirtualGpuBackend) -> None:
    backend.apply("f-c", ecc(1, count=0, corrupt_weights=True))
    assert backend.snapshot()[1].weights_corrupted
    assert backend.snapshot()[1].ecc_dbe_total == 0
    backend.apply("f-x", ecc(0, count=0, xid=63))
    assert backend.snapshot()[0].last_xid == 63
    backend.revert("f-c", ecc(1))
    backend.revert("f-x", ecc(0))
    assert not backend.snapshot()[1].weights_corrupted and backend.snapshot()[0].last_xid == 0


def test_a_restarted_backend_can_still_revert(tmp_path: Path) -> None:
    first = VirtualGpuBackend("node-1", tmp_path, gpus=2)
    first.apply("f-1", ecc(1, kind="double_bit", count=3, xid=95))
    again = VirtualGpuBackend("node-1", tmp_path, gpus=2, fresh=False)
    assert again.snapshot()[1].ecc_dbe_total == 3
    again.revert("f-1", ecc(1))
    assert again.snapshot()[1].ecc_dbe_total == 0 and again.snapshot()[1].last_xid == 0
    fresh = VirtualGpuBackend("node-1", tmp_path, gpus=2)
    assert fresh.snapshot()[1].ecc_dbe_total == 0


def test_what_a_shard_makes_of_its_gpu(backend: VirtualGpuBackend) -> None:
    healthy = backend.snapshot()[0]
    assert gpu_fault(healthy, 0, "node-0/gpu0") is None
    backend.apply("f-1", ecc(0, kind="double_bit"))
    assert gpu_fault(backend.snapshot()[0], 0, "node-0/gpu0") == (
        "uncorrectable ECC error (Xid 48) on node-0/gpu0")
    assert gpu_fault(backend.snapshot()[0], 1, "node-0/gpu0") is None  # already there at start
    backend.apply("f-2", ecc(1, count=0, xid=94))
    assert "Xid 94" in (gpu_fault(backend.snapshot()[1], 0, "node-0/gpu1") or "")
    backend.apply("f-3", ecc(2, count=0, xid=63))
    assert gpu_fault(backend.snapshot()[2], 0, "node-0/gpu2") is None
    assert gpu_fault(None, 0, "node-0/gpu3") is not None


def test_reverts_in_any_order_restore_the_gpu_and_its_published_text(
        backend: VirtualGpuBackend, tmp_path: Path) -> None:
    fresh = backend.snapshot()[1]
    thermal = FaultRequest("gpu.thermal", {"gpu": 1}, {})
    for first, second in (("f-ecc", "f-hot"), ("f-hot", "f-ecc")):  # LIFO, then FIFO
        backend.apply("f-ecc", ecc(1, kind="single_bit", count=2, xid=63))
        backend.apply("f-hot", thermal)
        hot = backend.snapshot()[1]
        assert (hot.ecc_sbe_total, hot.last_xid, hot.clock_event_reasons) == (2, 63, 0x60)
        backend.revert(first, thermal if first == "f-hot" else ecc(1))
        backend.revert(second, thermal if second == "f-hot" else ecc(1))
        assert backend.snapshot()[1] == fresh
        published = json.loads(node_state_path(tmp_path).read_text())
        assert published["gpus"][1] == fresh.to_json() and published["faults"] == {}


def test_a_gpu_state_copy_has_the_changed_values_and_only_fields() -> None:
    healthy = fresh_gpu("node-0", 0)
    hot = healthy.with_values({"temperature_c": 91.5})
    assert hot.to_json() == {**healthy.to_json(), "temperature_c": 91.5}
    assert healthy.temperature_c != 91.5  # the original is as it was
    assert set(hot.to_json()) == GPU_FIELDS
    with pytest.raises(TypeError, match="no field 'temp'"):
        healthy.with_values({"temp": 1})


def test_a_memory_leak_grows_to_its_cap_and_a_shard_allocation_fails_when_it_crosses(
        backend: VirtualGpuBackend, tmp_path: Path) -> None:
    """The leak grows in the published node state (what the node's exporter and shards
    read): used memory rises tick by tick, the shard's next allocation fails once too
    little is free, the cap holds, and reverting frees it all."""
    watcher = GpuStateWatcher(node_state_path(tmp_path), 1)
    start = watcher.current()
    assert start is not None and out_of_memory(start, "node-0/gpu1") is None
    request = FaultRequest("gpu.memory_leak", {"gpu": 1},
                           {"rate_fraction_per_s": 0.5, "cap_fraction": 0.99, "tick_s": 0.1})
    details = backend.apply("leak-1", request)
    free = start.memory_total_mib - start.memory_used_mib
    assert details["cap_mib"] == int(free * 0.99)
    seen: list[int] = []
    deadline = time.monotonic() + 20
    while not seen or seen[-1] < start.memory_used_mib + details["cap_mib"]:
        assert time.monotonic() < deadline, seen[-5:]
        state = watcher.current()
        assert state is not None
        if not seen or state.memory_used_mib != seen[-1]:
            seen.append(state.memory_used_mib)
        time.sleep(0.05)
    assert len(seen) > 3 and seen == sorted(seen)  # grew in steps, never shrank
    time.sleep(0.3)
    full = watcher.current()
    assert full is not None and full.memory_used_mib == start.memory_used_mib + details["cap_mib"]
    assert out_of_memory(full, "node-0/gpu1") is not None  # "CUDA out of memory"
    backend.revert("leak-1", request)
    after = watcher.current()
    assert after is not None and after.memory_used_mib == start.memory_used_mib
    time.sleep(0.3)  # the grower is gone: nothing grows back
    assert backend.snapshot()[1].memory_used_mib == start.memory_used_mib
    with pytest.raises(FaultRejected, match="exactly one of rate_bytes_per_s"):
        backend.apply("leak-2", FaultRequest("gpu.memory_leak", {"gpu": 1}, {}))
