"""The lab's Prometheus: its configuration, alert rules, command line and readiness.

Scrape and rule evaluation every second; static targets: each node's dcgm-style
exporter (job ``dcgm``), each agent (``gameday-agent``), the router, the controller and
the trainer (``gameday-trainer``).
Rules (``for: 0s``) keep the series' labels (``Hostname``, ``gpu``, ``UUID``, ...):
``GpuDoubleBitEcc``, ``GpuCriticalXid``, ``GpuFellOffBus`` and ``GpuThermalThrottle``
(``for: 2s``) are critical, ``GpuSingleBitEcc`` a warning.
"""

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from gameday.errors import LabError, LabSettingError
from gameday.lab.httpjson import fetch_json
from gameday.lab.layout import LabLayout

__all__ = [
    "ALERT_RULES",
    "CRITICAL_XIDS",
    "TargetsHealth",
    "expected_targets",
    "prometheus_argv",
    "prometheus_binary",
    "prometheus_config",
    "rules_document",
    "targets_health",
    "write_files",
]

#: Xids that make a GPU unusable for the controller: DBE, fallen off the bus,
#: contained and uncontained ECC errors.
CRITICAL_XIDS: Final = (48, 79, 94, 95)

ALERT_RULES: Final[tuple[dict[str, Any], ...]] = (
    {"alert": "GpuDoubleBitEcc",
     "expr": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0",
     "for": "0s",
     "labels": {"severity": "critical"},
     "annotations": {"summary": "double-bit ECC errors on {{ $labels.Hostname }}/gpu"
                                "{{ $labels.gpu }} ({{ $value }} since reset)"}},
    {"alert": "GpuCriticalXid",
     "expr": " or ".join(f"DCGM_FI_DEV_XID_ERRORS == {x}" for x in CRITICAL_XIDS),
     "for": "0s",
     "labels": {"severity": "critical"},
     "annotations": {"summary": "Xid {{ $value }} on {{ $labels.Hostname }}/gpu"
                                "{{ $labels.gpu }}"}},
    {"alert": "GpuSingleBitEcc",
     "expr": "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL > 0",
     "for": "0s",
     "labels": {"severity": "warning"},
     "annotations": {"summary": "single-bit ECC errors on {{ $labels.Hostname }}/gpu"
                                "{{ $labels.gpu }} ({{ $value }} since reset)"}},
    # A GPU exported in the last 10 minutes by an exporter that is up, but not now.
    {"alert": "GpuFellOffBus",
     "expr": 'last_over_time(DCGM_FI_DEV_GPU_TEMP[10m]) unless on(Hostname, gpu) '
             'DCGM_FI_DEV_GPU_TEMP and on(instance) (up{job="dcgm"} == 1)',
     "for": "0s",
     "labels": {"severity": "critical"},
     "annotations": {"summary": "{{ $labels.Hostname }}/gpu{{ $labels.gpu }} is gone from "
                                "its exporter (fell off the bus?)"}},
    # Clocks-event reason bits 0x20 (sw thermal) or 0x40 (hw thermal), held for 2 s: in
    # tensor parallelism one slow GPU slows every request, so the controller drains it.
    {"alert": "GpuThermalThrottle",
     "expr": "DCGM_FI_DEV_CLOCKS_EVENT_REASONS and "
             "floor(DCGM_FI_DEV_CLOCKS_EVENT_REASONS / 32) % 4 > 0",
     "for": "2s",
     "labels": {"severity": "critical"},
     "annotations": {"summary": "{{ $labels.Hostname }}/gpu{{ $labels.gpu }} thermal "
                                "slowdown (clocks-event reasons {{ $value }})"}},
)

_INSTALL_HINT: Final = "apt-get install --no-install-recommends prometheus"


def prometheus_binary() -> str:
    """The Prometheus server binary (``$GAMEDAY_PROMETHEUS`` or ``prometheus`` on PATH or
    ``/usr/bin/prometheus``); :class:`LabError` when there is none."""
    wanted = os.environ.get("GAMEDAY_PROMETHEUS")
    if wanted:
        if os.access(wanted, os.X_OK):
            return wanted
        raise LabSettingError(f"GAMEDAY_PROMETHEUS={wanted} is not an executable; unset it or "
                       f"{_INSTALL_HINT}")
    found = shutil.which("prometheus") or (
        "/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK) else None)
    if found is None:
        raise LabError(f"the lab needs a Prometheus server and none is installed; run "
                       f"`{_INSTALL_HINT}`")
    return found


def prometheus_config(layout: LabLayout, rules_file: Path) -> dict[str, Any]:
    def job(name: str, targets: Sequence[str]) -> dict[str, Any]:
        return {"job_name": name, "metrics_path": "/metrics", "scrape_timeout": "1s",
                "static_configs": [{"targets": list(targets)}]}

    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                   "external_labels": {"lab": str(layout.dir)}},
        "rule_files": [str(rules_file)],
        "scrape_configs": [
            job("dcgm", [f"127.0.0.1:{n.exporter_port}" for n in layout.nodes]),
            job("gameday-agent", [f"127.0.0.1:{n.agent_port}" for n in layout.nodes]),
            job("gameday-router", [f"127.0.0.1:{layout.router_port}"]),
            job("gameday-controller", [f"127.0.0.1:{layout.controller_port}"]),
            job("gameday-trainer", [f"127.0.0.1:{layout.trainer_port}"]),
        ],
    }


def rules_document() -> dict[str, Any]:
    return {"groups": [{"name": "gameday-lab-gpu", "interval": "1s",
                        "rules": [dict(rule) for rule in ALERT_RULES]}]}


def write_files(layout: LabLayout, directory: Path) -> Path:
    """Write ``prometheus.yml`` and ``rules.yml`` into ``directory``; return the config."""
    directory.mkdir(parents=True, exist_ok=True)
    rules = directory / "rules.yml"
    rules.write_text(yaml.safe_dump(rules_document(), sort_keys=False), encoding="utf-8")
    config = directory / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config(layout, rules), sort_keys=False),
                      encoding="utf-8")
    return config


def prometheus_argv(binary: str, config: Path, data: Path, port: int) -> list[str]:
    return [binary, f"--config.file={config}", f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1d",
            "--web.enable-lifecycle", "--log.format=json"]


@dataclass(frozen=True)
class TargetsHealth:
    """What ``/api/v1/targets`` says: how many targets, how many up, what is down."""

    total: int
    up: int
    down: tuple[str, ...]

    def all_up(self, expected: int) -> bool:
        return self.total == expected and self.up == expected

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "up": self.up, "down": list(self.down)}


def targets_health(prometheus_url: str, *, timeout: float = 1.0) -> TargetsHealth | None:
    """The scrape targets' health; ``None`` if Prometheus does not answer."""
    try:
        status, body = fetch_json("GET", prometheus_url + "/api/v1/targets?state=active",
                                  timeout=timeout)
    except OSError:
        return None
    if status != 200 or not isinstance(body, dict):
        return None
    active = (body.get("data") or {}).get("activeTargets") or []
    up = [t for t in active if t.get("health") == "up"]
    down = tuple(f"{t.get('labels', {}).get('job')}/{t.get('scrapeUrl')}: "
                 f"{t.get('health')} {t.get('lastError', '')}".strip()
                 for t in active if t.get("health") != "up")
    return TargetsHealth(len(active), len(up), down)


def expected_targets(layout: LabLayout) -> int:
    return 2 * len(layout.nodes) + 3
