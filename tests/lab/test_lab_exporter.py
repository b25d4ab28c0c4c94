"""The node's metrics read like dcgm-exporter's, and the alert rules are valid Prometheus."""

import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from gameday.lab.exporter import render_dcgm
from gameday.lab.gpustate import fresh_gpu
from gameday.lab.layout import LabLayout, Shape
from gameday.lab.prometheus import CRITICAL_XIDS, prometheus_config, rules_document, write_files

_SAMPLE = re.compile(r'^(?P<name>[A-Z_]+)\{(?P<labels>[^}]*)\} (?P<value>\S+)$')


def samples(text: str) -> dict[tuple[str, str], tuple[dict[str, str], float]]:
    """``(metric, gpu) -> (labels, value)`` from exposition text."""
    found = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
            found[(match["name"], labels["gpu"])] = (labels, float(match["value"]))
    return found


def test_dcgm_names_labels_and_values() -> None:
    gpus = [fresh_gpu("node-1", 0), replace(fresh_gpu("node-1", 1), ecc_dbe_total=2,
                                            last_xid=48, memory_used_mib=1000)]
    text = render_dcgm(gpus)
    assert "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter" in text
    assert "# TYPE DCGM_FI_DEV_XID_ERRORS gauge" in text
    found = samples(text)
    names = {name for name, _ in found}
    assert names == {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_FB_USED",
                     "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
                     "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_XID_ERRORS",
                     "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"}
    labels, value = found[("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "1")]
    assert value == 2
    assert set(labels) == {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}
    assert labels["Hostname"] == "node-1" and labels["device"] == "nvidia1"
    assert labels["UUID"] == gpus[1].uuid
    assert found[("DCGM_FI_DEV_XID_ERRORS", "1")][1] == 48
    assert found[("DCGM_FI_DEV_XID_ERRORS", "0")][1] == 0
    assert found[("DCGM_FI_DEV_FB_FREE", "1")][1] == 81559 - 1000


def test_a_gpu_that_fell_off_the_bus_is_not_exported() -> None:
    text = render_dcgm([fresh_gpu("n", 0), replace(fresh_gpu("n", 1), present=False)])
    assert 'gpu="0"' in text and 'gpu="1"' not in text


def test_rules_cover_the_critical_conditions() -> None:
    rules = {r["alert"]: r for r in rules_document()["groups"][0]["rules"]}
    assert rules["GpuDoubleBitEcc"]["labels"]["severity"] == "critical"
    assert rules["GpuSingleBitEcc"]["labels"]["severity"] == "warning"
    assert all(f"== {x}" in rules["GpuCriticalXid"]["expr"] for x in CRITICAL_XIDS)
    assert all(r["for"] == "0s" for name, r in rules.items() if name != "GpuThermalThrottle")


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_the_config_and_rules(tmp_path: Path) -> None:
    layout = LabLayout.plan(tmp_path, Shape())
    config = write_files(layout, tmp_path / "prometheus")
    result = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    jobs = {j["job_name"]: j for j in prometheus_config(layout, tmp_path)["scrape_configs"]}
    assert len(jobs["dcgm"]["static_configs"][0]["targets"]) == 2
