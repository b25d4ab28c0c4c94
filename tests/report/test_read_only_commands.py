"""Read-only commands write nothing: ``validate``, ``faults``, ``coverage``, ``report``
and ``audit verify`` run as real processes in an empty directory (no GAMEDAY_HOME, so
the defaults ``./.gameday`` and ``./journals`` apply) and leave it empty."""

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from gameday.evidence.journal import write_journal
from tests.safety.safety_helpers import REPO

GAMEDAY = str(Path(sys.executable).parent / "gameday")
FLAGSHIP = REPO / "tests" / "report" / "data" / "flagship-journal.json"


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_read_only_commands_create_no_file(tmp_path: Path) -> None:
    inputs = tmp_path / "inputs"
    journals = inputs / "journals"
    write_journal(journals / "a.json", json.loads(FLAGSHIP.read_text()))
    experiment = inputs / "exp.yaml"
    experiment.write_text(yaml.safe_dump({
        "version": "1.0.0", "title": "t", "description": "d",
        "method": [{"type": "probe", "name": "ok", "provider": {
            "type": "python", "module": "tests.fixtures.acts", "func": "ok"}}]}))
    before = _files(inputs)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GAMEDAY_")}
    env["PYTHONPATH"] = str(REPO)
    for command in (["validate", str(experiment)], ["faults"], ["faults", "--json"],
                    ["coverage", str(journals)], ["coverage", str(journals), "--format",
                                                  "json"],
                    ["report", str(journals / "a.json"), "--format", "md", "-o", "-"],
                    ["audit", "verify", str(journals)]):
        done = subprocess.run([GAMEDAY, *command], cwd=work, env=env, text=True,
                              capture_output=True, timeout=120)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        assert _files(work) == [], (command, _files(work))
    assert _files(inputs) == before
    # asked for its page without -o, report writes that page next to the journal, only it
    done = subprocess.run([GAMEDAY, "report", str(journals / "a.json"), "--format", "md"],
                          cwd=work, env=env, text=True, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _files(work) == [] and (journals / "a.md").exists()
