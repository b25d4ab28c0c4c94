"""``gpu.oom``: a virtual allocation that leaves too little device memory for the shard.

Parameters (exactly one): ``size_bytes`` (an integer >= 1, rounded up to whole MiB) or
``fraction`` (of the GPU's free memory, in (0, 1]). Target ``{"gpu": i}``.

Applying raises the GPU's used memory (``DCGM_FI_DEV_FB_USED`` up, ``DCGM_FI_DEV_FB_FREE``
down) as if another process held it. Asking for more than is free is refused and
nothing is held. A shard on the GPU fails its next allocation with "CUDA out of memory"
and exits (:mod:`gameday.lab.shard`); it cannot start there again until the memory is
freed. Reverting frees the allocation.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gameday.errors import FaultRejected
from gameday.lab.gpustate import GpuState
from gameday.lab.vfaults.base import check_known, float_param, target_gpu

__all__ = ["OomChange", "OomFault"]

MIB: Final = 1 << 20
_PARAMS: Final = ("size_bytes", "fraction")


@dataclass(frozen=True)
class OomChange:
    gpu: int
    mib: int

    def changes(self, state: GpuState) -> dict[str, Any]:
        return {"memory_used_mib": state.memory_used_mib + self.mib}

    def describe(self, applied: GpuState) -> dict[str, Any]:
        return {"held_mib": self.mib, "memory_used_mib": applied.memory_used_mib,
                "memory_free_mib": applied.memory_total_mib - applied.memory_used_mib}


class OomFault:
    kind = "gpu.oom"
    injected_at = "virtual"

    def validate(self, target: Mapping[str, Any], params: Mapping[str, Any],
                 gpus: Sequence[GpuState]) -> OomChange:
        check_known(self.kind, "parameter", params, _PARAMS)
        gpu = target_gpu(self.kind, target, gpus)
        given = [name for name in _PARAMS if params.get(name) is not None]
        if len(given) != 1:
            raise FaultRejected(f"{self.kind}: give exactly one of 'size_bytes' or 'fraction', "
                                f"got {', '.join(given) or 'neither'}")
        state = gpus[gpu]
        free_mib = state.memory_total_mib - state.memory_used_mib
        if given == ["size_bytes"]:
            size = params["size_bytes"]
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise FaultRejected(f"{self.kind}: parameter 'size_bytes' must be an integer >= 1, "
                                    f"got {size!r}")
            mib = math.ceil(size / MIB)
        else:
            fraction = float_param(self.kind, params, "fraction", default=1.0, low=0.0,
                                   high=1.0, low_open=True)
            mib = max(1, math.floor(fraction * free_mib))
        if mib > free_mib:
            raise FaultRejected(f"{self.kind}: cannot hold {mib} MiB on {state.label}: only "
                                f"{free_mib} MiB free; nothing was allocated")
        return OomChange(gpu, mib)
