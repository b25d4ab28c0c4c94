"""Alerts as the controller reads them from Prometheus (``GET /api/v1/alerts``).

Only alerts that name a GPU (labels ``Hostname`` and ``gpu``, carried through from the
dcgm-exporter series) are kept. ``activeAt`` is when the rule first held.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from gameday.lab.httpjson import fetch_json

__all__ = ["CRITICAL_ALERTS", "Alert", "PrometheusAlerts", "parse_alerts"]

#: Alerts on which the controller cordons the GPU and moves its shards away.
CRITICAL_ALERTS: Final = frozenset({"GpuDoubleBitEcc", "GpuCriticalXid", "GpuFellOffBus",
                                    "GpuThermalThrottle"})


@dataclass(frozen=True)
class Alert:
    name: str
    state: str  # "pending" | "firing"
    node: str
    gpu: int
    uuid: str
    severity: str
    active_at: float  # Unix epoch seconds
    value: str
    summary: str

    @property
    def critical(self) -> bool:
        return self.name in CRITICAL_ALERTS


def _epoch(text: str) -> float:
    # Prometheus writes RFC 3339 with up to nanoseconds; keep microseconds.
    head, dot, tail = text.rstrip("Z").partition(".")
    if dot:
        digits = "".join(ch for ch in tail if ch.isdigit())[:6]
        head = f"{head}.{digits}"
    return datetime.fromisoformat(head + "+00:00").timestamp()


def parse_alerts(items: Iterable[Mapping[str, Any]]) -> list[Alert]:
    """Alerts naming a GPU, from the ``data.alerts`` list of ``/api/v1/alerts``."""
    alerts = []
    for item in items:
        labels = item.get("labels") or {}
        try:
            alerts.append(Alert(
                name=str(labels["alertname"]), state=str(item.get("state", "")),
                node=str(labels["Hostname"]), gpu=int(labels["gpu"]),
                uuid=str(labels.get("UUID", "")), severity=str(labels.get("severity", "")),
                active_at=_epoch(str(item["activeAt"])), value=str(item.get("value", "")),
                summary=str((item.get("annotations") or {}).get("summary", ""))))
        except (KeyError, ValueError, TypeError):
            continue
    return alerts


class PrometheusAlerts:
    """Reads active alerts from a Prometheus server."""

    def __init__(self, prometheus_url: str, *, timeout_s: float = 1.0) -> None:
        self.url = prometheus_url.rstrip("/") + "/api/v1/alerts"
        self.timeout_s = timeout_s

    def fetch(self) -> list[Alert] | None:
        """The active alerts; ``None`` when Prometheus cannot be asked (then nothing can
        be concluded, e.g. no GPU may be uncordoned)."""
        try:
            status, body = fetch_json("GET", self.url, timeout=self.timeout_s)
        except OSError:
            return None
        if status != 200 or not isinstance(body, dict) or body.get("status") != "success":
            return None
        items = (body.get("data") or {}).get("alerts")
        return parse_alerts(items) if isinstance(items, list) else None
