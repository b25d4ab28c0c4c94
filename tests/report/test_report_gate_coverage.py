"""Gate verdicts, JUnit XML, the PR summary, the coverage matrix and the cost projection,
over journals recorded on the lab (varied per test; see reports_helpers)."""

import csv
import hashlib
import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gameday.evidence.summary import read_journal, read_summary, summarize
from gameday.gamedays import coverage
from gameday.gamedays.costs import LLAMA3_RATE_PER_GPU_DAY, Fleet, project
from gameday.gamedays.gate import evaluate, junit_xml, markdown_summary
from gameday.gamedays.play import ExperimentRun
from gameday.gamedays.playbook import Gate, PlannedExperiment, Playbook, Requirement
from tests.conftest import REPO, cli_env, gameday_main
from tests.report.reports_helpers import DATA, real_journal, varied, write

FLAGSHIP = REPO / "experiments" / "gpu-ecc-dbe-reshard.yaml"
SDC = REPO / "experiments" / "gpu-silent-corruption.yaml"


def _run(name: str, expect: str, journal: dict[str, object] | None, tmp_path: Path,
         exit_code: int | None = None) -> ExperimentRun:
    planned = PlannedExperiment(name, SDC if expect == "fail" else FLAGSHIP, expect)
    if journal is None:
        return ExperimentRun(planned, exit_code, None, None, "bad input" if exit_code else "")
    path = write(tmp_path / f"{name}.json", journal)  # type: ignore[arg-type]
    _, summary = read_journal(path)
    return ExperimentRun(planned, 0 if summary.passed else 1, path, summary)


def _playbook(gate: Gate) -> Playbook:
    return Playbook(path=Path("playbooks/release-gate.yaml"), title="Release gate",
                    description="", experiments=[], gate=gate, fleet=Fleet(stated=True))


def test_costs_formula() -> None:
    assert pytest.approx(419 / 54 / 16384) == LLAMA3_RATE_PER_GPU_DAY
    p = project(30.0)
    assert p.fleet.interruptions_per_day == pytest.approx(419 / 54)
    assert p.ettr == pytest.approx(1 / (1 + 419 / 54 * 30 / 86400))
    assert p.gpu_hours_lost_per_day == pytest.approx(16384 * 24 * (1 - p.ettr))
    assert round(p.gpu_hours_lost_per_day) == 1057
    with_rpo = project(30.0, rpo_s=600.0, fleet=Fleet(gpus=1024))
    assert with_rpo.ettr == pytest.approx(1 / (1 + 419 / 54 / 16 * 630 / 86400))


def test_gate_passes_with_expected_failure(tmp_path: Path) -> None:
    runs = [_run("ecc", "pass", real_journal("flagship"), tmp_path),
            _run("sdc", "fail", real_journal("silent-corruption"), tmp_path)]
    verdict = evaluate(_playbook(Gate(rto_max_s=20, reshard_max_s=10, min_ettr=0.999)), runs)
    assert verdict.passed and verdict.exit_code == 0, [c.message for c in verdict.failures]
    root = ET.fromstring(junit_xml(verdict))
    cases = root.findall(".//testcase")
    names = [c.get("name") for c in cases]
    assert "ecc" in names and "sdc" in names
    assert "recovered-within-rto (rto.measure_recovery)" in names
    assert any(n and n.startswith("min_ettr") for n in names)
    sdc = next(c for c in cases if c.get("name") == "sdc")
    assert sdc.find("skipped") is not None and "failed as expected" in \
        sdc.find("skipped").get("message", "")  # type: ignore[union-attr]
    assert root.get("failures") == "0" and int(root.get("skipped", "0")) >= 2
    summary = markdown_summary(verdict, runs)
    assert "✅ passed" in summary and "Known weaknesses" in summary and "GPU-hours" in summary


def test_gate_fails_naming_the_missed_slo(tmp_path: Path) -> None:
    runs = [_run("ecc-slow", "pass", varied(rto_s=23.4, passed=False, reasons=[
        "verifier 'recovered-within-rto' failed: rto 23.4 s > slo 20 s (missed by 3.4 s)"]),
        tmp_path),
            _run("ecc-fast", "pass", varied(rto_s=2.0), tmp_path),
            _run("sdc-fixed", "fail", varied(rto_s=1.0), tmp_path),
            _run("broken", "pass", None, tmp_path, exit_code=2)]
    verdict = evaluate(_playbook(Gate(rto_max_s=20, rto_p95_s=15, min_ettr=0.9999)), runs)
    assert not verdict.passed and verdict.exit_code == 1
    messages = {c.name: c.message for c in verdict.failures}
    assert "rto 23.4 s > slo 20 s (missed by 3.4 s)" in messages["ecc-slow"]
    assert "rto 23.4 s > slo 20 s (missed by 3.4 s)" in messages[
        "recovered-within-rto (rto.measure_recovery)"]
    assert messages["rto_max_s: RTO <= 20 s"] == \
        "gate.rto_max_s: RTO 23.40 s (ecc-slow) > 20 s (missed by 3.40 s)"
    assert "gate.rto_p95_s: RTO" in messages["rto_p95_s: RTO <= 15 s"]
    assert "expected to fail" in messages["sdc-fixed"] and "passed" in messages["sdc-fixed"]
    assert "could not run" in messages["broken"]
    assert "gate.min_ettr: projected ETTR" in messages["min_ettr: projected ETTR >= 0.9999"]
    root = ET.fromstring(junit_xml(verdict))
    assert int(root.get("failures", "0")) == len(verdict.failures) - verdict.count("error")
    summary = markdown_summary(verdict, runs)
    assert "❌ failed" in summary and "missed by 3.40 s" in summary


def test_gate_threshold_without_measurement_fails(tmp_path: Path) -> None:
    runs = [_run("ecc", "pass", varied(rto_s=None), tmp_path)]
    verdict = evaluate(_playbook(Gate(rto_max_s=20)), runs)
    assert [c.message for c in verdict.failures] == [
        "gate.rto_max_s: no RTO was measured, so the 20 s objective did not hold"]


def _journal_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "journals"
    write(directory / "a.json", varied(rto_s=1.0, end="2026-11-01T10:00:00+00:00"))
    write(directory / "b.json", varied(rto_s=3.0, end="2026-11-02T10:00:00+00:00"))
    write(directory / "sub" / "c.json", varied(
        rto_s=2.0, experiment="experiments/other-ecc.yaml", end="2026-11-03T10:00:00+00:00"))
    write(directory / "d.json", varied(fault="node.cpu_hog", layer="node", passed=False,
                                       rto_s=None, experiment="experiments/cpu-hog.yaml"))
    (directory / "not-a-journal.json").write_text('{"hello": 1}')
    (directory / "x.playbook.json").write_text('{"runs": []}')
    return directory


def test_coverage_matrix_cells_and_evidence(tmp_path: Path) -> None:
    directory = _journal_dir(tmp_path)
    matrix = coverage.build(directory)
    assert matrix.journals == 4 and len(matrix.skipped) == 1
    cell = matrix.cell("gpu.ecc", "device")
    assert cell is not None
    assert (cell.runs, cell.passed, cell.scenarios, cell.passing_scenarios) == (3, 3, 2, 2)
    assert cell.rto_p50 == 2.0 and cell.rto_p95 == pytest.approx(2.9)
    digest = hashlib.sha256((directory / "a.json").read_bytes()).hexdigest()
    assert digest in {sha for sha, _ in cell.evidence}
    data = json.loads(coverage.to_json(matrix))
    assert data["cells"][0]["last_run"] == "2026-11-03T10:00:00Z"
    rows = list(csv.DictReader(io.StringIO(coverage.to_csv(matrix))))
    assert {(r["fault"], r["layer"], r["runs"]) for r in rows} == {
        ("gpu.ecc", "device", "3"), ("node.cpu_hog", "node", "1")}
    assert digest in rows[0]["evidence_sha256"]
    markdown = coverage.to_markdown(matrix)
    assert "| gpu.ecc | 3/3 (lab) |" in markdown
    assert "<table>" in coverage.to_html(matrix) and "default-src 'none'" in \
        coverage.to_html(matrix)


def test_coverage_requirements_missing_and_failing(tmp_path: Path) -> None:
    matrix = coverage.build(_journal_dir(tmp_path))
    findings = matrix.check([
        Requirement("gpu.ecc", "device", 2, "GPU ECC"),
        Requirement("node.cpu_hog", "node", 1, "CPU saturation"),
        Requirement("gpu.oom", "container", 12, "GPU memory leak")])
    assert [f.line() for f in findings] == [
        "failing: CPU saturation (node.cpu_hog) at node level: 0 of 1 required scenarios "
        "passing on their latest run (1 run)",
        "missing: GPU memory leak (gpu.oom) at container level: 0 of 12 required scenarios "
        "run"]
    assert matrix.exit_code == 1


def test_coverage_cli_with_reference_requirements(tmp_path: Path) -> None:
    directory = _journal_dir(tmp_path)
    env = cli_env(tmp_path)
    result = gameday_main(["coverage", str(directory), "--format", "json", "--require",
                      "playbooks/coverage/ai-infra-maturity.yaml"], env)
    assert result.returncode == 1, result.stderr
    assert "missing: CPU saturation (node.cpu_hog) at node level: 1 of 7" in result.stderr
    assert "missing: GPU memory leak (gpu.memory_leak) at container level: 0 of 12" in result.stderr
    assert "missing: inference API timeout (service.timeout) at service level: 0 of 9" in \
        result.stderr
    assert json.loads(result.stdout)["journals"] == 4
    requirement = tmp_path / "req.yaml"
    requirement.write_text("coverage:\n  require:\n    - {fault: gpu.ecc, layer: device, "
                           "scenarios: 2}\n")
    out = tmp_path / "cov.html"
    result = gameday_main(["coverage", str(directory), "--format", "html", "-o", str(out),
                      "--require", str(requirement)], env)
    assert result.returncode == 0, result.stderr
    assert "1 of 1 required cells met" in result.stderr and out.read_text().startswith(
        "<!doctype html>")
    bad = tmp_path / "bad.yaml"
    bad.write_text("coverage:\n  require:\n    - {fault: gpu.ecc, layer: kernel}\n")
    result = gameday_main(["coverage", str(directory), "--require", str(bad)], env)
    assert result.returncode == 2
    assert "bad.yaml:3: coverage.require[0].layer: must be one of device" in result.stderr


def test_summary_reads_real_journals() -> None:
    flagship = summarize(real_journal("flagship"))
    assert flagship.passed and flagship.fault == "gpu.ecc" and flagship.layer == "device"
    assert flagship.rto_s == pytest.approx(1.204) and flagship.reshard_s == pytest.approx(1.139)
    silent = summarize(real_journal("silent-corruption"))
    assert not silent.passed and any("prediction hash mismatch" in r for r in silent.reasons)


def test_fast_summary_matches_a_full_parse(tmp_path: Path) -> None:
    """read_summary decodes only the top-level sections it needs; the result must equal
    the full parse, and a journal in another layout falls back to the full parse."""
    for name in ("flagship", "silent-corruption"):
        path = DATA / f"{name}-journal.json"
        _, full = read_journal(path)
        assert read_summary(path) == full
    compact = tmp_path / "compact.json"
    compact.write_text(json.dumps(real_journal("flagship"), separators=(",", ":")))
    _, full = read_journal(compact)
    assert read_summary(compact) == full and full.rto_s == pytest.approx(1.204)
