"""``gpu.thermal``: a hot virtual GPU that holds its clocks down.

Parameters: :class:`gameday.kinds.gpu.ThermalParams` (``reason`` ``sw_thermal`` is
clocks-event bit 0x20, ``hw_thermal`` 0x20 | 0x40; ``allow_device_settings`` is accepted
for parity with the real backend: nothing here is a real device). Target ``{"gpu": i}``.

Applying raises ``DCGM_FI_DEV_GPU_TEMP``, lowers ``DCGM_FI_DEV_SM_CLOCK`` and sets
``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``; shards on the GPU answer slower by the clock ratio
(:mod:`gameday.lab.shard`). Reverting restores temperature, clock and reasons.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from gameday.kinds.gpu import GPU_THERMAL, ThermalParams
from gameday.lab.gpustate import (
    CLOCK_EVENT_HW_THERMAL,
    CLOCK_EVENT_SW_THERMAL,
    SM_CLOCK_MHZ,
    GpuState,
)
from gameday.lab.vfaults.base import target_gpu

__all__ = ["THERMAL_REASONS", "ThermalChange", "ThermalFault"]

Reason = Literal["sw_thermal", "hw_thermal"]
#: Clocks-event reason bits of each ``reason``.
THERMAL_REASONS: Final[Mapping[Reason, int]] = {
    "sw_thermal": CLOCK_EVENT_SW_THERMAL,
    "hw_thermal": CLOCK_EVENT_SW_THERMAL | CLOCK_EVENT_HW_THERMAL,
}


@dataclass(frozen=True)
class ThermalChange:
    gpu: int
    temperature_c: float
    clock_ratio: float
    reasons: int

    def changes(self, state: GpuState) -> dict[str, Any]:
        return {"temperature_c": self.temperature_c,
                "sm_clock_mhz": max(1, round(SM_CLOCK_MHZ * self.clock_ratio)),
                "clock_event_reasons": state.clock_event_reasons | self.reasons}

    def describe(self, applied: GpuState) -> dict[str, Any]:
        return {"temperature_c": applied.temperature_c, "sm_clock_mhz": applied.sm_clock_mhz,
                "clock_ratio": self.clock_ratio,
                "clock_event_reasons": applied.clock_event_reasons}


class ThermalFault:
    kind = "gpu.thermal"
    injected_at = "virtual"
    spec = GPU_THERMAL

    def validate(self, target: Mapping[str, Any], params: ThermalParams,
                 gpus: Sequence[GpuState]) -> ThermalChange:
        gpu = target_gpu(self.kind, target, gpus)
        return ThermalChange(gpu, params.temperature_c, params.clock_ratio,
                             THERMAL_REASONS[params.reason])
