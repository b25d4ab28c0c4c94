"""``gpu.memory_leak``: virtual device memory held by someone else, growing at a rate up to
a cap.

Parameters: :class:`gameday.kinds.gpu.MemoryLeakParams`: a rate (bytes, or a fraction
of the GPU's free memory at the start, per second), a cap (bytes, or a fraction of that
free memory) and ``tick_s`` (how often it grows). Target ``{"gpu": i}``.

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

from gameday.kinds.gpu import GPU_MEMORY_LEAK, MemoryLeakParams
from gameday.lab.gpustate import GpuState
from gameday.lab.vfaults.base import target_gpu

__all__ = ["LeakChange", "LeakFault"]

MIB: Final = 1 << 20


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


class LeakFault:
    kind = "gpu.memory_leak"
    injected_at = "virtual"
    spec = GPU_MEMORY_LEAK

    def validate(self, target: Mapping[str, Any], params: MemoryLeakParams,
                 gpus: Sequence[GpuState]) -> LeakChange:
        gpu = target_gpu(self.kind, target, gpus)
        state = gpus[gpu]
        free_mib = state.memory_total_mib - state.memory_used_mib
        if params.rate_bytes_per_s is not None:
            rate_mib = params.rate_bytes_per_s / MIB
        else:
            rate_mib = free_mib * (params.rate_fraction_per_s or 0.0)
        if params.cap_bytes is not None:
            cap_mib = min(free_mib, math.ceil(params.cap_bytes / MIB))
        else:
            cap_mib = math.floor(free_mib * params.cap_fraction)
        return LeakChange(gpu, state.memory_used_mib, rate_mib, cap_mib, params.tick_s)
