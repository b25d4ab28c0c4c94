"""``gpu.thermal``: a hot virtual GPU that holds its clocks down.

Parameters: ``temperature_c`` (30..120, default 92), ``clock_ratio`` (the SM clock as a
fraction of its maximum, (0, 1], default 0.5), ``reason`` (``"sw_thermal"``: clocks-event
bit 0x20; ``"hw_thermal"``, the default: 0x20 | 0x40), ``allow_device_settings`` (accepted
for parity with the real backend; nothing here is a real device). Target ``{"gpu": i}``.

Applying raises ``DCGM_FI_DEV_GPU_TEMP``, lowers ``DCGM_FI_DEV_SM_CLOCK`` and sets
``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``; shards on the GPU answer slower by the clock ratio
(:mod:`gameday.lab.shard`). Reverting restores temperature, clock and reasons.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from gameday.lab.gpustate import (
    CLOCK_EVENT_HW_THERMAL,
    CLOCK_EVENT_SW_THERMAL,
    SM_CLOCK_MHZ,
    GpuState,
)
from gameday.lab.vfaults.base import (
    bool_param,
    check_known,
    choice_param,
    float_param,
    target_gpu,
)

__all__ = ["THERMAL_REASONS", "ThermalChange", "ThermalFault"]

Reason = Literal["sw_thermal", "hw_thermal"]
#: Clocks-event reason bits of each ``reason``.
THERMAL_REASONS: Final[Mapping[Reason, int]] = {
    "sw_thermal": CLOCK_EVENT_SW_THERMAL,
    "hw_thermal": CLOCK_EVENT_SW_THERMAL | CLOCK_EVENT_HW_THERMAL,
}
_PARAMS: Final = ("temperature_c", "clock_ratio", "reason", "allow_device_settings")


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

    def validate(self, target: Mapping[str, Any], params: Mapping[str, Any],
                 gpus: Sequence[GpuState]) -> ThermalChange:
        check_known(self.kind, "parameter", params, _PARAMS)
        gpu = target_gpu(self.kind, target, gpus)
        temperature = float_param(self.kind, params, "temperature_c", default=92.0, low=30.0,
                                  high=120.0)
        ratio = float_param(self.kind, params, "clock_ratio", default=0.5, low=0.0, high=1.0,
                            low_open=True)
        reason = choice_param(self.kind, params, "reason", tuple(THERMAL_REASONS),
                              default="hw_thermal")
        bool_param(self.kind, params, "allow_device_settings", default=False)
        assert reason is not None
        return ThermalChange(gpu, temperature, ratio, THERMAL_REASONS[reason])
