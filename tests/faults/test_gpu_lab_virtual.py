"""The lab side of the GPU kinds: the virtual backend's oom, xid, thermal and
fall-off-bus faults, what the exporter and a shard make of them, the alert rules, and
the healer moving a shard whose restart in place failed (driven by hand with a fake
clock and STAND-IN shard processes; the real processes run in
test_gpu_lab_experiments)."""

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from gameday.clock import FakeClock
from gameday.contract.backend import FaultRequest
from gameday.errors import FaultRejected
from gameday.kinds import CATALOGUE
from gameday.lab.alerts import CRITICAL_ALERTS
from gameday.lab.devices import VirtualGpuBackend
from gameday.lab.exporter import render_dcgm
from gameday.lab.gpustate import SM_CLOCK_MHZ, fresh_gpu
from gameday.lab.healing import Healer
from gameday.lab.placement import GpuSlot, initial_placement
from gameday.lab.prometheus import rules_document
from gameday.lab.shard import (
    MODEL_DEVICE_MS,
    SHARD_ALLOCATION_MIB,
    gpu_fault,
    out_of_memory,
    throttle_delay_s,
)


def fault(kind: str, gpu: Any = 0, **params: Any) -> FaultRequest:
    return FaultRequest(kind, {"gpu": gpu}, params)


@pytest.fixture
def backend(tmp_path: Path) -> VirtualGpuBackend:
    return VirtualGpuBackend("node-0", tmp_path, gpus=4)


def test_every_gpu_kind_of_the_catalogue_has_a_virtual_backend(
        backend: VirtualGpuBackend) -> None:
    gpu_kinds = {name for name in CATALOGUE if name.startswith("gpu.")}
    assert gpu_kinds == {"gpu.ecc", "gpu.oom", "gpu.memory_leak", "gpu.xid", "gpu.thermal",
                         "gpu.fall_off_bus"}
    assert set(backend.kinds()) == gpu_kinds
    for name in gpu_kinds:
        kind = CATALOGUE[name]
        assert kind.injected_at["lab"] == "virtual" and kind.coverage_layer == "device"
        assert kind.module == "faults.gpu" and kind.selector == "gpu"


def test_oom_by_fraction_holds_memory_until_reverted(backend: VirtualGpuBackend) -> None:
    free = 81559 - 1
    applied = backend.apply("o1", fault("gpu.oom", 1, size_bytes=None, fraction=0.99))
    held = math.floor(0.99 * free)
    assert applied["held_mib"] == held and applied["memory_free_mib"] == free - held
    state = backend.snapshot()[1]
    assert out_of_memory(state, state.label) is not None
    lines = render_dcgm(backend.snapshot()).splitlines()
    assert any(line.startswith('DCGM_FI_DEV_FB_FREE{gpu="1"')
               and line.endswith(f" {free - held}") for line in lines)
    backend.revert("o1", fault("gpu.oom"))
    assert backend.snapshot()[1].memory_used_mib == 1
    assert out_of_memory(backend.snapshot()[1], "x") is None


def test_oom_by_bytes_rounds_up_to_mib_and_refuses_more_than_is_free(
        backend: VirtualGpuBackend) -> None:
    applied = backend.apply("o1", fault("gpu.oom", 0, size_bytes=3 * 2**20 + 1))
    assert applied["held_mib"] == 4
    before = backend.snapshot()
    with pytest.raises(FaultRejected, match="cannot hold 81555 MiB on node-0/gpu0: only "
                                            "81554 MiB free; nothing was allocated"):
        backend.apply("o2", fault("gpu.oom", 0, size_bytes=81555 * 2**20))
    assert backend.snapshot() == before


@pytest.mark.parametrize(("params", "names"), [
    ({}, "exactly one of size_bytes or fraction, got neither"),
    ({"size_bytes": 1, "fraction": 0.5}, "got size_bytes and fraction"),
    ({"fraction": 0}, r"params\.fraction: must be > 0"),
    ({"fraction": 1.5}, r"params\.fraction: must be <= 1"),
    ({"size_bytes": 0}, r"params\.size_bytes: must be >= 1"),
    ({"size_bytes": "1G"}, r"params\.size_bytes: must be an integer"),
    ({"size_bytes": 1, "zz": {"a": {}}}, r"params\.zz: unknown parameter of gpu\.oom"),
])
def test_invalid_oom_requests_name_the_parameter(backend: VirtualGpuBackend,
                                                 params: dict[str, Any], names: str) -> None:
    with pytest.raises(FaultRejected, match=names):
        backend.apply("o1", fault("gpu.oom", 0, **params))


def test_the_shard_runs_out_of_memory_only_below_its_allocation() -> None:
    gpu = fresh_gpu("n", 0)
    almost = replace(gpu, memory_used_mib=gpu.memory_total_mib - SHARD_ALLOCATION_MIB)
    assert out_of_memory(almost, "n/gpu0") is None
    full = replace(almost, memory_used_mib=almost.memory_used_mib + 1)
    assert out_of_memory(full, "n/gpu0") == (
        f"CUDA out of memory: tried to allocate {SHARD_ALLOCATION_MIB} MiB on n/gpu0 "
        f"({SHARD_ALLOCATION_MIB - 1} MiB free of {gpu.memory_total_mib} MiB)")


def test_xid_sets_the_last_xid_and_reverts(backend: VirtualGpuBackend) -> None:
    backend.apply("x1", fault("gpu.xid", 2, xid=43))
    state = backend.snapshot()[2]
    assert state.last_xid == 43 and gpu_fault(state, 0, state.label) is None
    backend.apply("x2", fault("gpu.xid", 3, xid=95))
    assert "Xid 95" in (gpu_fault(backend.snapshot()[3], 0, "l") or "")
    backend.revert("x1", fault("gpu.xid"))
    assert backend.snapshot()[2].last_xid == 0
    for params in ({}, {"xid": 0}, {"xid": 1000}, {"xid": "48"}, {"xid": 48, "count": 1}):
        with pytest.raises(FaultRejected, match=r"gpu\.xid"):
            backend.apply("x3", fault("gpu.xid", 0, **params))


def test_thermal_heats_slows_and_sets_the_clock_event_reasons(
        backend: VirtualGpuBackend) -> None:
    applied = backend.apply("t1", fault("gpu.thermal", 1, temperature_c=94, clock_ratio=0.2,
                                        reason="hw_thermal", allow_device_settings=False))
    assert applied["clock_event_reasons"] == 0x60 and applied["sm_clock_mhz"] == 396
    state = backend.snapshot()[1]
    assert state.temperature_c == 94.0
    assert throttle_delay_s(state) == pytest.approx(MODEL_DEVICE_MS * 4 / 1000)
    assert throttle_delay_s(backend.snapshot()[0]) == 0.0
    text = render_dcgm(backend.snapshot())
    assert 'DCGM_FI_DEV_CLOCKS_EVENT_REASONS{gpu="1"' in text
    assert any(line.startswith('DCGM_FI_DEV_CLOCKS_EVENT_REASONS{gpu="1"')
               and line.endswith(" 96") for line in text.splitlines())
    backend.revert("t1", fault("gpu.thermal"))
    state = backend.snapshot()[1]
    assert (state.temperature_c, state.sm_clock_mhz, state.clock_event_reasons) == (
        35.0, SM_CLOCK_MHZ, 0)
    backend.apply("t2", fault("gpu.thermal", 0, reason="sw_thermal"))
    assert backend.snapshot()[0].clock_event_reasons == 0x20
    for params in ({"clock_ratio": 0}, {"temperature_c": 200}, {"reason": "hot"}):
        with pytest.raises(FaultRejected, match=r"gpu\.thermal"):
            backend.apply("t3", fault("gpu.thermal", 2, **params))


def test_a_gpu_that_falls_off_the_bus_leaves_inventory_and_metrics(
        backend: VirtualGpuBackend) -> None:
    backend.apply("b1", fault("gpu.fall_off_bus", 2))
    assert [g["index"] for g in backend.inventory()["gpus"]] == [0, 1, 3]
    assert 'gpu="2"' not in render_dcgm(backend.snapshot())
    assert "fallen off the bus" in (gpu_fault(backend.snapshot()[2], 0, "l") or "")
    with pytest.raises(FaultRejected, match="not present"):
        backend.apply("b2", fault("gpu.fall_off_bus", 2))
    with pytest.raises(FaultRejected, match="unknown parameter"):
        backend.apply("b3", fault("gpu.fall_off_bus", 1, xid=79))
    backend.revert("b1", fault("gpu.fall_off_bus"))
    assert len(backend.inventory()["gpus"]) == 4 and backend.snapshot()[2].last_xid == 0


def test_the_alert_rules_for_missing_and_throttled_gpus_are_critical() -> None:
    rules = {r["alert"]: r for r in rules_document()["groups"][0]["rules"]}
    assert {"GpuFellOffBus", "GpuThermalThrottle"} <= CRITICAL_ALERTS
    assert rules["GpuFellOffBus"]["labels"]["severity"] == "critical"
    assert "unless on(Hostname, gpu)" in rules["GpuFellOffBus"]["expr"]
    assert rules["GpuThermalThrottle"]["for"] == "2s"


# -- the healer: a restart in place that fails moves the shard --------------------------


@dataclass
class StandInShard:
    """Stand-in for a shard process: exits or becomes ready when the test says so."""

    shard: int
    node: str
    gpu: int
    code: int | None = None
    ready: bool = False
    pid: int = 0

    def poll(self) -> int | None:
        return self.code

    def ready_url(self) -> str | None:
        return f"http://shard-{self.node}-{self.gpu}" if self.ready else None

    def terminate(self) -> None:
        self.code = -15

    def kill(self) -> None:
        self.code = -9


@dataclass
class StandInLauncher:
    started: list[StandInShard] = field(default_factory=list)

    def launch(self, shard: int, node: str, gpu: int) -> StandInShard:
        self.started.append(StandInShard(shard, node, gpu, pid=len(self.started) + 1))
        return self.started[-1]


def test_a_crashed_shard_is_restarted_in_place_then_moved_if_that_fails() -> None:
    clock, launcher = FakeClock(), StandInLauncher()
    gpus = [GpuSlot(n, g, f"uuid-{n}-{g}", n, order=i * 4 + g)
            for i, n in enumerate(["node-0", "node-1"]) for g in range(4)]
    healer = Healer(gpus, initial_placement(["node-0", "node-1"], 4, 6), launcher,
                    lambda version, routes: None, clock)
    healer.tick()
    for handle in launcher.started:
        handle.ready = True
    healer.tick()
    launcher.started[0].code = 1  # CUDA out of memory: the process exited
    healer.tick()
    restart = launcher.started[-1]
    assert (restart.node, restart.gpu) == ("node-0", 0)  # first, in place
    restart.code = 1  # the memory is still held: it cannot start there
    healer.tick()
    clock.advance(10)
    healer.tick()
    moved = launcher.started[-1]
    assert (moved.node, moved.gpu) == ("node-0", 3)  # a free GPU in the same domain
    moved.ready = True
    healer.tick()
    doc = healer.placement()
    assert (doc["shards"][0]["node"], doc["shards"][0]["gpu"]) == ("node-0", 3)
    assert doc["shards"][0]["status"] == "serving"
    assert [e["type"] for e in doc["events"]] == ["shard_moved"]
