"""GPU fault actions (Chaos Toolkit activities).

Each action resolves its GPU selector on the run's target, checks the blast radius,
and injects through the node's agent under a lease; the run's ledger records every
fault so ``revert`` (and the runner, always) can undo it.
"""

from typing import Any

from chaoslib.exceptions import ActivityFailed

from faults.kinds.gpu import GPU_ECC
from gameday import session as sessions
from gameday.errors import GamedayError

__all__ = ["ecc_error", "revert"]


def ecc_error(gpu: dict[str, Any], kind: str = "double_bit", count: int = 1,
              xid: int | None = None, corrupt_weights: bool = False,
              lease_s: float | None = None) -> dict[str, Any]:
    """Inject ECC errors on the selected GPU(s).

    ``gpu`` selects the GPU: ``{holding_shard: 0}``, ``{node: node-0, index: 2}`` or
    ``{uuid: GPU-...}``. ``kind`` is ``single_bit`` or ``double_bit``; ``count`` errors are
    added to the GPU's volatile ECC counter; ``xid`` (48, 63, 64, 94 or 95) is reported
    with them; ``corrupt_weights`` silently corrupts the model weights the GPU holds (no
    counter moves when ``count`` is 0 — the controller cannot see it). The fault lasts
    until reverted or until its lease (``lease_s``, default the experiment's) lapses.

    Returns ``{"faults": [{"id", "gpu", "injected_at", "applied_at", "expires_at"}]}``.
    """
    params = GPU_ECC.validate({"kind": kind, "count": count, "xid": xid,
                               "corrupt_weights": corrupt_weights})
    if params["count"] == 0 and not params["corrupt_weights"] and params["xid"] is None:
        raise ActivityFailed("gpu.ecc with count 0 needs corrupt_weights or an xid")
    return _inject_on_gpus(GPU_ECC.name, "ecc_error", gpu, params, lease_s)


def revert() -> dict[str, Any]:
    """Revert every fault this run applied (idempotent); fails if any could not be reverted."""
    session = sessions.current()
    before = len(session.ledger.active())
    failures = session.revert_all("rollback")
    if failures:
        raise ActivityFailed("could not revert: " + "; ".join(failures))
    return {"reverted": before}


def _inject_on_gpus(kind: str, action: str, selector: dict[str, Any],
                    params: dict[str, Any], lease_s: float | None) -> dict[str, Any]:
    session = sessions.current()
    try:
        target = session.require_target()
        gpus = target.resolve_gpus(selector)
        session.check_blast_radius(gpus)
        applied = []
        for gpu in gpus:
            entry = session.inject(node=gpu.node, kind=kind, target={"gpu": gpu.index},
                                   params=params, action=action, lease_s=lease_s)
            applied.append({"id": entry.id, "gpu": gpu.label(), "injected_at": entry.injected_at,
                            "applied_at": entry.applied_at, "expires_at": entry.expires_at})
    except GamedayError as exc:
        raise ActivityFailed(str(exc)) from None
    return {"faults": applied}
