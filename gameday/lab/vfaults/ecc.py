"""``gpu.ecc``: ECC errors on a virtual GPU, with an optional Xid and silent corruption.

Parameters: ``kind`` (``"single_bit"`` | ``"double_bit"``, required when ``count > 0``),
``count`` (0..1_000_000, default 1; 0 only with ``xid`` or ``corrupt_weights``), ``xid``
(48, 63, 64, 94, 95 or null), ``corrupt_weights`` (default false). Target ``{"gpu": i}``.

Applying adds ``count`` to the volatile SBE or DBE total, sets the last Xid, and marks
the GPU's weights corrupted if asked (shards on it then answer wrongly, silently).
Reverting restores the counters, clears the Xid and the corruption: the GPU was reset.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from gameday.errors import FaultRejected
from gameday.lab.gpustate import GpuState
from gameday.lab.vfaults.base import (
    bool_param,
    check_known,
    choice_param,
    int_param,
    target_gpu,
)

__all__ = ["ECC_XIDS", "EccChange", "EccFault"]

EccKind = Literal["single_bit", "double_bit"]
ECC_KINDS: Final[tuple[EccKind, ...]] = ("single_bit", "double_bit")
#: Xids an ECC fault may report: 48 DBE, 63/64 row remapping, 94 contained, 95 uncontained.
ECC_XIDS: Final = (48, 63, 64, 94, 95)
MAX_COUNT: Final = 1_000_000
_PARAMS: Final = ("kind", "count", "xid", "corrupt_weights")


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

    def validate(self, target: Mapping[str, Any], params: Mapping[str, Any],
                 gpus: Sequence[GpuState]) -> EccChange:
        check_known(self.kind, "parameter", params, _PARAMS)
        gpu = target_gpu(self.kind, target, gpus)
        count = int_param(self.kind, params, "count", default=1, low=0, high=MAX_COUNT)
        ecc_kind = choice_param(self.kind, params, "kind", ECC_KINDS, required=count > 0)
        xid = params.get("xid")
        if xid is not None:
            xid = choice_param(self.kind, params, "xid", ECC_XIDS)
        corrupt = bool_param(self.kind, params, "corrupt_weights", default=False)
        if count == 0 and xid is None and not corrupt:
            raise FaultRejected(f"{self.kind}: parameter 'count' may be 0 only with 'xid' or "
                                "'corrupt_weights' (it would change nothing)")
        return EccChange(gpu=gpu, ecc_kind=ecc_kind, count=count, xid=xid,
                         corrupt_weights=corrupt)
