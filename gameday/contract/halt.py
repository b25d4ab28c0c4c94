"""The fleet's safety lever on Kubernetes: one ConfigMap that ``gameday halt`` writes and
every agent reads (:mod:`gameday.agent.halt_watch`), shared by both sides.

The lever is engaged while ConfigMap :data:`CONFIGMAP` exists in the agents' namespace
with ``data.engaged: "true"``; released when it is deleted (or says anything else).
"""

from dataclasses import dataclass
from typing import Final

__all__ = ["CONFIGMAP", "FleetLever", "fleet_lever_data", "parse_fleet_lever"]

#: The name of the lever's ConfigMap, in the agents' namespace.
CONFIGMAP: Final = "gameday-halt"


@dataclass(frozen=True)
class FleetLever:
    """What the ConfigMap says: engaged or not, why, by whom and when (epoch seconds)."""

    engaged: bool
    reason: str = ""
    engaged_by: str = ""
    engaged_at: float | None = None


def fleet_lever_data(lever: FleetLever) -> dict[str, str]:
    """The ConfigMap's ``data`` for ``lever`` (ConfigMap values are strings)."""
    return {"engaged": "true" if lever.engaged else "false", "reason": lever.reason,
            "engaged_by": lever.engaged_by,
            "engaged_at": "" if lever.engaged_at is None else repr(lever.engaged_at)}


def parse_fleet_lever(data: dict[str, str] | None) -> FleetLever:
    """The lever a ConfigMap's ``data`` holds (a missing or odd field reads as empty; an
    ``engaged`` other than ``"true"`` as released)."""
    data = data or {}
    try:
        at: float | None = float(data.get("engaged_at") or "")
    except ValueError:
        at = None
    return FleetLever(engaged=str(data.get("engaged", "")).strip().lower() == "true",
                      reason=str(data.get("reason") or ""),
                      engaged_by=str(data.get("engaged_by") or ""), engaged_at=at)
