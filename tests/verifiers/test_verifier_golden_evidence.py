"""Goldens are evidence: ``save_golden`` never overwrites one unless told, and writes
nothing after a failed verifier or an unmet steady state (a real numpy model over real
HTTP; the last test runs a real ``gameday run``)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from chaoslib.exceptions import ActivityFailed

from gameday.engine.session import Session
from tests.safety.safety_helpers import REPO, env_for
from tests.verifiers.verifier_helpers import ModelServer, new_session
from verifiers.prediction_hash import matches_golden, save_golden


def test_an_existing_golden_is_replaced_only_when_told(session: Session, model: ModelServer,
                                                       tmp_path: Path) -> None:
    endpoint, path = f"{model.url}/predict", tmp_path / "golden.json"
    first = save_golden(endpoint, str(path), rows=4)
    kept = path.read_bytes()
    model.corrupt = (0, 1.0)  # now another model answers
    with pytest.raises(ActivityFailed, match=f"golden file {path} exists; pass overwrite: "
                                             "true to replace it"):
        save_golden(endpoint, str(path), rows=4)
    assert path.read_bytes() == kept
    new_session()  # a later run (in this one, the refusal above is a failed verifier)
    second = save_golden(endpoint, str(path), rows=4, overwrite=True)
    assert second["digest"] != first["digest"]
    assert json.loads(path.read_text())["digest"] == second["digest"]
    assert [p.name for p in tmp_path.iterdir()] == ["golden.json"]  # no temp file left


def test_nothing_is_written_after_a_failed_verifier(session: Session, model: ModelServer,
                                                    tmp_path: Path) -> None:
    endpoint, path = f"{model.url}/predict", tmp_path / "golden.json"
    with pytest.raises(ActivityFailed):
        matches_golden(endpoint, golden="0" * 64, rows=4)
    skipped = save_golden(endpoint, str(path), rows=4, overwrite=True)
    assert skipped["skipped"] is True and not path.exists()
    assert skipped["why"].startswith("not saved: verifier prediction_hash.matches_golden "
                                     "failed: prediction hash mismatch")
    recorded = session.results[-1]
    assert recorded.passed is None and recorded.measurement["skipped"] is True


def test_a_run_with_an_unmet_steady_state_saves_no_golden(model: ModelServer,
                                                          tmp_path: Path) -> None:
    """A real ``gameday run``: the steady state is unmet, the rollback's save_golden
    records that it skipped, and the golden file is not written."""
    golden = tmp_path / "golden.json"
    experiment = tmp_path / "golden.yaml"
    experiment.write_text(yaml.safe_dump({
        "version": "1.0.0", "title": "save a golden", "description": "steady state unmet",
        "steady-state-hypothesis": {"title": "the model is up", "probes": [
            {"type": "probe", "name": "healthy", "tolerance": True, "provider": {
                "type": "python", "module": "tests.fixtures.acts", "func": "value",
                "arguments": {"result": False}}}]},
        "method": [{"type": "probe", "name": "nothing", "provider": {
            "type": "python", "module": "tests.fixtures.acts", "func": "ok"}}],
        "rollbacks": [{"type": "action", "name": "save", "provider": {
            "type": "python", "module": "verifiers.prediction_hash", "func": "save_golden",
            "arguments": {"endpoint": f"{model.url}/predict", "path": str(golden),
                          "rows": 4}}}]}, sort_keys=False))
    journal = tmp_path / "journal.json"
    done = subprocess.run([str(Path(sys.executable).parent / "gameday"), "run",
                           str(experiment), "--journal-path", str(journal)],
                          env=env_for(tmp_path), cwd=REPO, text=True, capture_output=True,
                          timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert not golden.exists()
    [result] = [r for r in json.loads(journal.read_text())["gameday"]["verifiers"]
                if r["verifier"] == "prediction_hash.save_golden"]
    assert result["measurement"]["skipped"] is True
    assert "steady state 'the model is up' unmet" in result["reason"], result
