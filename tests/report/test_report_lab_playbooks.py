"""The three shipped playbooks on the embedded lab (real processes, Prometheus, HTTP),
through the real ``gameday`` command line: a release gate with an expected failure, a
weekly game day drawn from the Llama 3 mix, and an audit run checked by the coverage
matrix. One lab for the module."""

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import gameday, lab_faults, read_json

pytestmark = pytest.mark.lab


def _record(directory: Path) -> dict[str, object]:
    [record] = directory.glob("*.playbook.json")
    loaded: dict[str, object] = read_json(record)
    return loaded


def test_release_gate_passes_with_the_known_weakness(tmp_path: Path, lab_env: dict[str, str],
                                                     lab_dir: Path) -> None:
    junit, summary, journals = tmp_path / "gate.xml", tmp_path / "gate.md", tmp_path / "j"
    result = gameday(["gate", "playbooks/release-gate.yaml", "--journal-dir", str(journals),
                      "--junit", str(junit), "--summary", str(summary)], lab_env, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert "gate: PASSED" in result.stdout
    suite = ET.parse(junit).getroot()
    assert suite.get("failures") == "0" and suite.get("errors") == "0"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["ecc-dbe-reshard"].find("failure") is None
    assert cases["silent-corruption"].find("skipped") is not None  # expected to fail
    assert "recovered-within-rto (rto.measure_recovery)" in cases
    assert any(name and name.startswith("min_ettr") for name in cases)
    text = summary.read_text()
    assert "Resilience gate ✅ passed" in text and "GPU-hours lost per day" in text
    runs = _record(journals)["runs"]
    assert [(r["name"], r["outcome"]) for r in runs] == [  # type: ignore[index, union-attr]
        ("ecc-dbe-reshard", "passed"), ("silent-corruption", "failed")]
    assert lab_faults(lab_dir) == []


def test_weekly_gameday_draws_from_the_llama3_mix(tmp_path: Path, lab_env: dict[str, str],
                                                  lab_dir: Path) -> None:
    journals = tmp_path / "weekly"
    result = gameday(["play", "playbooks/weekly-gameday.yaml", "--journal-dir", str(journals)],
                     lab_env, timeout=300)
    record = _record(journals)
    runs = record["runs"]
    assert isinstance(runs, list) and len(runs) == 3
    assert all(r["drawn_from"] for r in runs)
    draw = record["draw"]
    assert isinstance(draw, dict) and (draw["count"], draw["seed"]) == (3, 24)
    assert str(draw["mix"]).endswith("playbooks/fault-mix/llama3.yaml")
    assert result.returncode == (0 if all(r["as_expected"] for r in runs) else 1), \
        result.stdout[-3000:]
    assert "playbook: Weekly game day" in result.stdout and "game day:" in result.stdout
    assert "not rehearsed by this mix: Host maintenance (7.6%)" in result.stdout
    # The journals of one game day form one hash chain.
    chained = sorted(journals.glob("*-0[1-3]-*.json"))
    assert len(chained) == 3
    previous = [read_json(p)["gameday"]["previous_sha256"] for p in chained]
    assert previous[0] is None and previous[1] == runs[0]["sha256"]
    assert previous[2] == runs[1]["sha256"]
    audit = gameday(["audit", "verify", str(journals)], lab_env)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert lab_faults(lab_dir) == []


def test_audit_run_meets_its_coverage_and_reports(tmp_path: Path, lab_env: dict[str, str],
                                                  lab_dir: Path) -> None:
    journals = tmp_path / "audit"
    result = gameday(["play", "playbooks/audit-coverage.yaml", "--journal-dir", str(journals)],
                     lab_env, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    result = gameday(["coverage", str(journals), "--format", "json", "--require",
                      "playbooks/audit-coverage.yaml"], lab_env)
    assert result.returncode == 0, result.stderr
    matrix = json.loads(result.stdout)
    assert [r["state"] for r in matrix["requirements"]] == ["met"] * 6
    [cell] = [c for c in matrix["cells"] if (c["fault"], c["layer"]) == ("gpu.ecc", "device")]
    assert cell["runs"] == 1 and cell["passing_scenarios"] == 1 and cell["rto_p50_s"] > 0
    assert len(cell["evidence"][0]["sha256"]) == 64
    result = gameday(["coverage", str(journals), "--require",
                      "playbooks/coverage/ai-infra-maturity.yaml"], lab_env)
    assert result.returncode == 1 and "missing: GPU memory leak (gpu.memory_leak)" in result.stderr
    journal = next(p for p in journals.glob("*-device-gpu-ecc.json"))
    html_path = tmp_path / "report.html"
    result = gameday(["report", str(journal), "-o", str(html_path)], lab_env)
    assert result.returncode == 0, result.stderr
    page = html_path.read_text()
    assert page.count("<svg") == 2 and "fault-window" in page and "RTO " in page
    result = gameday(["report", str(journal), "--format", "md", "--fleet-gpus", "1024", "-o", "-"],
                     lab_env)
    assert result.returncode == 0 and "## What it costs at scale" in result.stdout
    assert "on a 1,024-GPU training job" in result.stdout
    assert lab_faults(lab_dir) == []
