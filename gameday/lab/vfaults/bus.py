"""``gpu.fall_off_bus``: a virtual GPU falls off the PCIe bus (Xid 79).

No parameters (:class:`gameday.kinds.gpu.FallOffBusParams`). Target ``{"gpu": i}``.

Applying makes the GPU absent: it leaves the node's inventory and its dcgm-exporter
series, its last Xid is 79, and shards on it fail every request
(:mod:`gameday.lab.shard`). The lab's ``GpuFellOffBus`` alert fires for a GPU that was
exported and is no longer, so the controller cordons it and moves its shards.
Reverting brings it back (as after a node reboot or a bus reset).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gameday.kinds.gpu import GPU_FALL_OFF_BUS, FallOffBusParams
from gameday.lab.gpustate import GpuState
from gameday.lab.vfaults.base import target_gpu

__all__ = ["XID_FALLEN_OFF_BUS", "FallOffBusChange", "FallOffBusFault"]

XID_FALLEN_OFF_BUS: Final = 79


@dataclass(frozen=True)
class FallOffBusChange:
    gpu: int

    def changes(self, state: GpuState) -> dict[str, Any]:
        return {"last_xid": XID_FALLEN_OFF_BUS, "present": False}

    def describe(self, applied: GpuState) -> dict[str, Any]:
        return {"xid": XID_FALLEN_OFF_BUS, "present": applied.present}


class FallOffBusFault:
    kind = "gpu.fall_off_bus"
    injected_at = "virtual"
    spec = GPU_FALL_OFF_BUS

    def validate(self, target: Mapping[str, Any], params: FallOffBusParams,
                 gpus: Sequence[GpuState]) -> FallOffBusChange:
        return FallOffBusChange(target_gpu(self.kind, target, gpus))
