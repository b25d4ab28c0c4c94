"""End to end on the embedded lab: real processes, real Prometheus, real HTTP, real signals.

One lab for the module. The experiments are the shipped ones, run through the real
``gameday`` and ``chaos`` command lines exactly as a user would.
"""

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import BIN, REPO, chaos, gameday, lab_faults, read_json

pytestmark = pytest.mark.lab


def test_flagship_experiment_passes(tmp_path: Path, lab_env: dict[str, str],
                                    lab_dir: Path) -> None:
    journal_path = tmp_path / "journal.json"
    result = gameday(["run", "experiments/gpu-ecc-dbe-reshard.yaml", "--journal-path",
                      str(journal_path)], lab_env, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    journal = read_json(journal_path)
    gd = journal["gameday"]
    assert gd["verdict"]["passed"] is True
    [fault] = gd["faults"]
    assert fault["kind"] == "gpu.ecc" and fault["injected_at"] == "virtual"
    assert fault["reverted_at"] is not None
    results = {r["verifier"]: r for r in gd["verifiers"]}
    rto = results["rto.measure_recovery"]["measurement"]
    assert rto["met"] is True and 0 < rto["rto_s"] <= 20 and rto["failures"] > 0
    assert results["reshard.verify_reshard"]["passed"] is True
    assert "RTO" in result.stdout or "rto" in result.stdout
    assert lab_faults(lab_dir) == []


def test_silent_corruption_fails_on_the_hash(tmp_path: Path, lab_env: dict[str, str],
                                            lab_dir: Path) -> None:
    journal_path = tmp_path / "journal.json"
    result = gameday(["run", "experiments/gpu-silent-corruption.yaml", "--journal-path",
                      str(journal_path)], lab_env, timeout=180)
    assert result.returncode == 1, result.stdout + result.stderr
    reasons = read_json(journal_path)["gameday"]["verdict"]["reasons"]
    assert any("prediction hash mismatch" in reason for reason in reasons), reasons
    assert "prediction hash mismatch" in result.stdout
    assert lab_faults(lab_dir) == []


def _experiment_with_fault(tmp_path: Path, *, selector: dict[str, Any], kind: str = "double_bit",
                           max_gpus: int = 1, extra_method: list[dict[str, Any]] | None = None,
                           lease_s: int = 30) -> Path:
    document = {
        "title": "t", "description": "d",
        "extensions": [{"name": "gameday", "target": "lab", "lease_s": lease_s,
                        "blast_radius": {"max_gpus": max_gpus}}],
        "method": [{"type": "action", "name": "ecc",
                    "provider": {"type": "python", "module": "faults.gpu", "func": "ecc_error",
                                 "arguments": {"gpu": selector, "kind": kind}}},
                   *(extra_method or [])],
        "rollbacks": [{"type": "action", "name": "revert",
                       "provider": {"type": "python", "module": "faults.gpu",
                                    "func": "revert"}}],
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_invalid_input_injects_nothing(tmp_path: Path, lab_env: dict[str, str],
                                      lab_dir: Path) -> None:
    before = len(lab_faults(lab_dir, include_reverted=True))
    path = _experiment_with_fault(tmp_path, selector={"holding_shard": 0}, kind="triple_bit")
    result = gameday(["run", str(path)], lab_env)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    path = _experiment_with_fault(tmp_path, selector={"node": "node-0"}, max_gpus=1)
    result = gameday(["run", str(path)], lab_env)
    assert result.returncode == 2
    assert "blast_radius.max_gpus is 1; nothing injected" in result.stderr
    path = _experiment_with_fault(tmp_path, selector={"holding_shard": 99})
    result = gameday(["run", str(path)], lab_env)
    assert result.returncode == 2 and "no shard 99" in result.stderr
    result = gameday(["run", str(_experiment_with_fault(tmp_path, selector={"node": "node-0"},
                                                         max_gpus=4)), "--dry-run"], lab_env)
    assert result.returncode == 0 and "nothing injected" in result.stdout
    assert "node-0/gpu3" in result.stdout
    assert len(lab_faults(lab_dir, include_reverted=True)) == before


def test_orchestrator_killed_fault_reverted_by_lease(tmp_path: Path, lab_env: dict[str, str],
                                                    lab_dir: Path) -> None:
    """kill -9 of ``gameday run`` mid-fault: the agent reverts within lease + 1 s."""
    lease_s = 2
    sleep = {"type": "action", "name": "hold", "provider": {
        "type": "python", "module": "tests.fixtures.acts", "func": "sleep",
        "arguments": {"seconds": 60}}}
    path = _experiment_with_fault(tmp_path, selector={"holding_shard": 1}, kind="single_bit",
                                  extra_method=[sleep], lease_s=lease_s)
    proc = subprocess.Popen([str(BIN / "gameday"), "run", str(path)], env=lab_env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not lab_faults(lab_dir):
            assert time.monotonic() < deadline and proc.poll() is None, "fault never applied"
            time.sleep(0.05)
        time.sleep(lease_s * 1.5)  # the renewer keeps the lease alive past its first term
        assert lab_faults(lab_dir), "the lease was not renewed while the run lived"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    killed_at = time.monotonic()
    while lab_faults(lab_dir):
        assert time.monotonic() - killed_at <= lease_s + 1, "fault outlived its lease"
        time.sleep(0.05)
    reverted = [f for f in lab_faults(lab_dir, include_reverted=True)
                if f.get("revert_reason") == "lease-expired"]
    assert reverted


def test_chaos_run_works_against_running_lab(tmp_path: Path, lab_env: dict[str, str],
                                             lab_dir: Path) -> None:
    journal_path = tmp_path / "chaos.json"
    result = chaos(["run", "experiments/gpu-ecc-dbe-reshard.yaml", "--journal-path",
                    str(journal_path)], lab_env, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    journal = read_json(journal_path)
    assert journal["status"] == "completed"
    assert journal["gameday"]["verdict"]["passed"] is True
    assert all(f["reverted_at"] for f in journal["gameday"]["faults"])
    assert lab_faults(lab_dir) == []
