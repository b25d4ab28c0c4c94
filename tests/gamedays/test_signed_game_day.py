"""The audit walk-through of docs/gamedays.md, end to end through the real CLI: a signed
game day (``play --sign-key``), ``audit verify`` and ``coverage`` with only the public key,
and the game day's own report. The experiments are trivial (no target), so only the
evidence path is under test here."""

import json
from pathlib import Path

import yaml

from tests.conftest import cli_env, gameday_main, python_activity, write_experiment


def test_a_signed_game_day_verifies_with_the_public_key(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    experiments = []
    for name in ("one", "two"):
        experiments.append({"name": name, "path": str(write_experiment(tmp_path / f"{name}.yaml", {
            "title": name, "description": "trivial",
            "method": [python_activity("action", "noop", "ok")]}))})
    playbook = tmp_path / "day.yaml"
    playbook.write_text(yaml.safe_dump({"version": 1, "title": "signed day",
                                        "experiments": experiments}))
    assert gameday_main(["audit", "keygen", str(tmp_path / "k" / "day.key")], env).returncode == 0
    public = tmp_path / "k" / "day.key.pub"
    journals = tmp_path / "journals"
    played = gameday_main(["play", str(playbook), "--journal-dir", str(journals), "--sign-key",
                      str(tmp_path / "k" / "day.key")], env)
    assert played.returncode == 0, played.stdout + played.stderr
    assert len(list(journals.glob("*.sig"))) == 3  # two journals and the record
    verified = gameday_main(["audit", "verify", str(journals), "--public-key", str(public)], env)
    assert verified.stdout.strip() == "audit: OK: 3 journals, chain intact, 3 signed"
    covered = gameday_main(["coverage", str(journals), "--format", "json", "--public-key",
                       str(public)], env)
    assert covered.returncode == 0, covered.stderr
    document = json.loads(covered.stdout)
    assert document["journals"] == 2 and document["rejected"] == []
    assert document["provenance"]["signatures_checked_against_trusted_key"] is True
    [record] = journals.glob("*.playbook.json")
    reported = gameday_main(["report", str(record), "--format", "md"], env)
    assert reported.returncode == 0, reported.stderr
    page = record.with_name(record.name.replace(".playbook.json", ".md")).read_text()
    assert page.startswith("# signed day: PASSED") and "| one | pass | passed | yes |" in page
    other = tmp_path / "k" / "other.key"
    gameday_main(["audit", "keygen", str(other)], env)
    refused = gameday_main(["coverage", str(journals), "--public-key", f"{other}.pub"], env)
    assert refused.returncode == 0 and refused.stderr.count("bad signature") == 2
