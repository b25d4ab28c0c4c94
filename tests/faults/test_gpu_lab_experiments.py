"""The GPU fault experiments end to end on one embedded lab: real node, shard, router and
controller processes, real Prometheus alerts, real HTTP, through the real ``gameday run``
command line, each leaving no fault active behind it."""

from pathlib import Path
from typing import Any

import pytest

from gameday.wire.agent_client import AgentClient
from tests.conftest import cli_env, gameday, read_json

pytestmark = pytest.mark.lab


def active_faults(lab_dir: Path) -> list[dict[str, Any]]:
    document = read_json(lab_dir / "lab.json")
    token = Path(document["token_file"]).read_text().strip()
    return [fault for node in document["nodes"]
            for fault in AgentClient(node["agent_url"], token).faults()]


def controller_events(lab_dir: Path) -> list[dict[str, Any]]:
    from gameday.lab.httpjson import fetch_json

    status, body = fetch_json("GET", read_json(lab_dir / "lab.json")["placement_url"],
                              timeout=5.0)
    assert status == 200
    events: list[dict[str, Any]] = body["events"]
    return events


@pytest.mark.parametrize(("experiment", "kind", "alert"), [
    ("gpu-oom-restart", "gpu.oom", None),
    ("gpu-memory-leak", "gpu.memory_leak", None),
    ("gpu-thermal-throttle", "gpu.thermal", "GpuThermalThrottle"),
    ("gpu-fall-off-bus", "gpu.fall_off_bus", "GpuFellOffBus"),
])
def test_gpu_experiment_passes_and_leaves_nothing(experiment: str, kind: str,
                                                  alert: str | None, tmp_path: Path,
                                                  lab_dir: Path) -> None:
    env = cli_env(tmp_path)
    env["GAMEDAY_LAB_DIR"] = str(lab_dir)
    journal_path = tmp_path / "journal.json"
    seen_before = len(controller_events(lab_dir))
    result = gameday(["run", f"experiments/{experiment}.yaml", "--journal-path",
                      str(journal_path)], env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    gd = read_json(journal_path)["gameday"]
    assert gd["verdict"]["passed"] is True
    [fault] = gd["faults"]
    assert fault["kind"] == kind and fault["injected_at"] == "virtual"
    assert fault["reverted_at"] is not None
    results = {r["verifier"]: r for r in gd["verifiers"]}
    rto = results["rto.measure_recovery"]["measurement"]
    assert rto["met"] is True and rto["failures"] > 0 and 0 < rto["rto_s"] <= rto["slo_s"]
    assert results["reshard.verify_reshard"]["passed"] is True
    assert active_faults(lab_dir) == []
    events = controller_events(lab_dir)[seen_before:]
    types = [e["type"] for e in events]
    assert "shard_moved" in types
    if alert is not None:
        assert any(e.get("alert") == alert for e in events if e["type"] == "gpu_cordoned")
    else:  # the OOM is seen as a crash: no alert cordons the GPU
        assert "gpu_cordoned" not in types
