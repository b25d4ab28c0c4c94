"""``gpu.memory_leak``: virtual device memory held by someone else, growing at a rate up to
a cap.

Parameters: exactly one of ``rate_bytes_per_s`` (an integer >= 1) or
``rate_fraction_per_s`` (of the GPU's free memory at the start, in (0, 1]); a cap,
``cap_bytes`` or ``cap_fraction`` (of that free memory, default 1); ``tick_s`` (how
often it grows, default 0.5). Target ``{"gpu": i}``.

While applied, the GPU's used memory is its used memory at the start plus what the leak
holds, ``min(cap, rate * elapsed)`` in whole MiB, never more than the GPU has: the
backend grows it every ``tick_s`` (:meth:`LeakChange.grow`). A shard on the GPU fails
its next allocation with "CUDA out of memory" once too little is free. Reverting frees
it all.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gameday.errors import FaultRejected
from gameday.lab.gpustate import GpuState
from gameday.lab.vfaults.base import check_known, float_param, target_gpu

__all__ = ["LeakChange", "LeakFault"]

MIB: Final = 1 << 20
_PARAMS: Final = ("rate_bytes_per_s", "rate_fraction_per_s", "cap_bytes", "cap_fraction",
                  "tick_s")


@dataclass(frozen=True)
class LeakChange:
    gpu: int
    base_used_mib: int
    rate_mib_per_s: float
    cap_mib: int
    tick_s: float

    #: the fields :meth:`grow` sets, restored on revert
    grown_fields: tuple[str, ...] = ("memory_used_mib",)

    def held_mib(self, elapsed_s: float) -> int:
        return min(self.cap_mib, math.floor(self.rate_mib_per_s * max(0.0, elapsed_s)))

    def changes(self, state: GpuState) -> dict[str, Any]:
        return {}  # nothing held yet: the leak starts at zero

    def grow(self, state: GpuState, elapsed_s: float) -> dict[str, Any]:
        """The GPU's used memory ``elapsed_s`` after the start."""
        used = min(state.memory_total_mib, self.base_used_mib + self.held_mib(elapsed_s))
        return {"memory_used_mib": used}

    def describe(self, applied: GpuState) -> dict[str, Any]:
        return {"rate_mib_per_s": round(self.rate_mib_per_s, 3), "cap_mib": self.cap_mib,
                "tick_s": self.tick_s, "memory_used_mib": applied.memory_used_mib,
                "memory_free_mib": applied.memory_total_mib - applied.memory_used_mib}


def _positive_int(kind: str, params: Mapping[str, Any], name: str) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FaultRejected(f"{kind}: parameter {name!r} must be an integer >= 1, "
                            f"got {value!r}")
    return value


class LeakFault:
    kind = "gpu.memory_leak"
    injected_at = "virtual"

    def validate(self, target: Mapping[str, Any], params: Mapping[str, Any],
                 gpus: Sequence[GpuState]) -> LeakChange:
        check_known(self.kind, "parameter", params, _PARAMS)
        gpu = target_gpu(self.kind, target, gpus)
        state = gpus[gpu]
        free_mib = state.memory_total_mib - state.memory_used_mib
        rates = [name for name in ("rate_bytes_per_s", "rate_fraction_per_s")
                 if params.get(name) is not None]
        if len(rates) != 1:
            raise FaultRejected(f"{self.kind}: give exactly one of 'rate_bytes_per_s' or "
                                f"'rate_fraction_per_s', got {', '.join(rates) or 'neither'}")
        rate_bytes = _positive_int(self.kind, params, "rate_bytes_per_s")
        if rate_bytes is not None:
            rate_mib = rate_bytes / MIB
        else:
            rate_mib = free_mib * float_param(self.kind, params, "rate_fraction_per_s",
                                              default=0.01, low=0.0, high=1.0,
                                              low_open=True)
        cap_bytes = _positive_int(self.kind, params, "cap_bytes")
        if cap_bytes is not None:
            cap_mib = min(free_mib, math.ceil(cap_bytes / MIB))
        else:
            cap_mib = math.floor(free_mib * float_param(
                self.kind, params, "cap_fraction", default=1.0, low=0.0, high=1.0,
                low_open=True))
        tick_s = float_param(self.kind, params, "tick_s", default=0.5, low=0.05, high=60.0)
        return LeakChange(gpu, state.memory_used_mib, rate_mib, cap_mib, tick_s)
