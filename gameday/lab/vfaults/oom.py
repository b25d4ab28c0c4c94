"""``gpu.oom``: a virtual allocation that leaves too little device memory for the shard.

Parameters: :class:`gameday.kinds.gpu.OomParams`, exactly one of ``size_bytes``
(rounded up to whole MiB) or ``fraction`` (of the GPU's free memory). Target
``{"gpu": i}``.

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
from gameday.kinds.gpu import GPU_OOM, OomParams
from gameday.lab.gpustate import GpuState
from gameday.lab.vfaults.base import target_gpu

__all__ = ["OomChange", "OomFault"]

MIB: Final = 1 << 20


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
    spec = GPU_OOM

    def validate(self, target: Mapping[str, Any], params: OomParams,
                 gpus: Sequence[GpuState]) -> OomChange:
        gpu = target_gpu(self.kind, target, gpus)
        state = gpus[gpu]
        free_mib = state.memory_total_mib - state.memory_used_mib
        if params.size_bytes is not None:
            mib = math.ceil(params.size_bytes / MIB)
        else:
            mib = max(1, math.floor((params.fraction or 1.0) * free_mib))
        if mib > free_mib:
            raise FaultRejected(f"{self.kind}: cannot hold {mib} MiB on {state.label}: only "
                                f"{free_mib} MiB free; nothing was allocated")
        return OomChange(gpu, mib)
