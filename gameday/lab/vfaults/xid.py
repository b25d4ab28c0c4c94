"""``gpu.xid``: an Xid reported by a virtual GPU's driver.

Parameter: ``xid`` (required, 1..999). Target ``{"gpu": i}``.

Applying sets the GPU's last Xid (``DCGM_FI_DEV_XID_ERRORS``); what follows depends on
the Xid, as on a real GPU: 48/94/95 stop the shards on it and 79 means the GPU fell off
the bus (:mod:`gameday.lab.shard`), the controller's ``GpuCriticalXid`` alert fires for
48, 79, 94 and 95; others are recorded and seen only by monitoring. Reverting clears it.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gameday.errors import FaultRejected
from gameday.lab.gpustate import GpuState
from gameday.lab.vfaults.base import check_known, int_param, target_gpu

__all__ = ["MAX_XID", "XidChange", "XidFault"]

MAX_XID: Final = 999


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

    def validate(self, target: Mapping[str, Any], params: Mapping[str, Any],
                 gpus: Sequence[GpuState]) -> XidChange:
        check_known(self.kind, "parameter", params, ("xid",))
        gpu = target_gpu(self.kind, target, gpus)
        if params.get("xid") is None:
            raise FaultRejected(f"{self.kind}: parameter 'xid' is required (1..{MAX_XID})")
        return XidChange(gpu, int_param(self.kind, params, "xid", default=0, low=1,
                                        high=MAX_XID))
