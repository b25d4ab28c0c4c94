"""``gpu.xid``: an Xid reported by a virtual GPU's driver.

Parameters: :class:`gameday.kinds.gpu.XidParams` (``xid``). Target ``{"gpu": i}``.

Applying sets the GPU's last Xid (``DCGM_FI_DEV_XID_ERRORS``); what follows depends on
the Xid, as on a real GPU: 48/94/95 stop the shards on it and 79 means the GPU fell off
the bus (:mod:`gameday.lab.shard`), the controller's ``GpuCriticalXid`` alert fires for
48, 79, 94 and 95; others are recorded and seen only by monitoring. Reverting clears it.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gameday.kinds.gpu import GPU_XID, XidParams
from gameday.lab.gpustate import GpuState
from gameday.lab.vfaults.base import target_gpu

__all__ = ["XidChange", "XidFault"]


@dataclass(frozen=True)
class XidChange:
    gpu: int
    xid: int

    def changes(self, state: GpuState) -> dict[str, Any]:
        return {"last_xid": self.xid}

    def describe(self, applied: GpuState) -> dict[str, Any]:
        return {"xid": self.xid}


class XidFault:
    kind = "gpu.xid"
    injected_at = "virtual"
    spec = GPU_XID

    def validate(self, target: Mapping[str, Any], params: XidParams,
                 gpus: Sequence[GpuState]) -> XidChange:
        return XidChange(target_gpu(self.kind, target, gpus), params.xid)
