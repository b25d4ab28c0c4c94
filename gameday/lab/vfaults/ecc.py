"""``gpu.ecc``: ECC errors on a virtual GPU, with an optional Xid and silent corruption.

Parameters: :class:`gameday.kinds.gpu.EccParams` (parsed by the kind's declaration
before they get here). Target ``{"gpu": i}``.

Applying adds ``count`` to the volatile SBE or DBE total, sets the last Xid, and marks
the GPU's weights corrupted if asked (shards on it then answer wrongly, silently).
Reverting restores the counters, clears the Xid and the corruption: the GPU was reset.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from gameday.kinds.gpu import ECC_XIDS, GPU_ECC, EccParams
from gameday.lab.gpustate import GpuState
from gameday.lab.vfaults.base import target_gpu

__all__ = ["ECC_XIDS", "EccChange", "EccFault"]

EccKind = Literal["single_bit", "double_bit"]
ECC_KINDS: Final[tuple[EccKind, ...]] = ("single_bit", "double_bit")


@dataclass(frozen=True)
class EccChange:
    gpu: int
    ecc_kind: EccKind | None
    count: int
    xid: int | None
    corrupt_weights: bool

    def changes(self, state: GpuState) -> dict[str, Any]:
        changes: dict[str, Any] = {}
        if self.count and self.ecc_kind == "single_bit":
            changes["ecc_sbe_total"] = state.ecc_sbe_total + self.count
        elif self.count and self.ecc_kind == "double_bit":
            changes["ecc_dbe_total"] = state.ecc_dbe_total + self.count
        if self.xid is not None:
            changes["last_xid"] = self.xid
        if self.corrupt_weights:
            changes["weights_corrupted"] = True
        return changes

    def describe(self, applied: GpuState) -> dict[str, Any]:
        return {"ecc_kind": self.ecc_kind, "count": self.count, "xid": self.xid,
                "corrupt_weights": self.corrupt_weights,
                "ecc_sbe_total": applied.ecc_sbe_total, "ecc_dbe_total": applied.ecc_dbe_total}


class EccFault:
    kind = "gpu.ecc"
    injected_at = "virtual"
    spec = GPU_ECC

    def validate(self, target: Mapping[str, Any], params: EccParams,
                 gpus: Sequence[GpuState]) -> EccChange:
        gpu = target_gpu(self.kind, target, gpus)
        return EccChange(gpu=gpu, ecc_kind=params.kind if params.count else None,
                         count=params.count, xid=params.xid,
                         corrupt_weights=params.corrupt_weights)
