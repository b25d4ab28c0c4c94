"""Journals never collide: unique default names, never replaced, and a linear chain when
several real processes write one directory at once."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gameday.evidence import audit
from gameday.evidence.journal import JournalExists, write_journal
from tests.safety.safety_helpers import REPO, env_for, gameday

GAMEDAY = str(Path(sys.executable).parent / "gameday")

#: A process that writes ``count`` journals into DIR as fast as it can.
WRITER = ("import sys, pathlib\n"
          "from gameday.evidence.journal import write_journal\n"
          "out, tag, count = pathlib.Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])\n"
          "for n in range(count):\n"
          "    write_journal(out / f'{tag}-{n}.json', {'status': 'completed', 'n': n})\n")


def _passing_experiment(path: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "version": "1.0.0", "title": "passes", "description": "one probe that passes",
        "method": [{"type": "probe", "name": "ok", "provider": {
            "type": "python", "module": "tests.fixtures.acts", "func": "ok"}}]}))
    return path


def test_an_existing_journal_is_never_replaced(tmp_path: Path) -> None:
    write_journal(tmp_path / "j.json", {"status": "completed"})
    before = (tmp_path / "j.json").read_bytes()
    head = (tmp_path / ".chain-head").read_text()
    with pytest.raises(JournalExists, match="never replaced"):
        write_journal(tmp_path / "j.json", {"status": "failed"})
    assert (tmp_path / "j.json").read_bytes() == before
    assert (tmp_path / ".chain-head").read_text() == head
    assert sorted(p.name for p in tmp_path.iterdir()) == [".chain-head", ".chain-head.lock",
                                                         "j.json"]
    assert audit.verify(tmp_path).ok


def test_concurrent_writers_keep_one_linear_chain(tmp_path: Path) -> None:
    """Four real processes, twenty journals each, into one directory at once."""
    env = env_for(tmp_path)
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), f"w{w}", "20"],
                                env=env) for w in range(4)]
    assert [w.wait(120) for w in writers] == [0, 0, 0, 0]
    result = audit.verify(tmp_path)
    assert result.ok and result.journals == 80, result.line()


def test_two_runs_of_one_experiment_in_one_second_write_two_journals(tmp_path: Path) -> None:
    """The seen case: the same experiment twice at once wrote one default name."""
    path = _passing_experiment(tmp_path / "same.yaml")
    env = env_for(tmp_path)
    runs = [subprocess.Popen([GAMEDAY, "run", str(path)], env=env, cwd=REPO, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            for _ in range(2)]
    outputs = [run.communicate(timeout=120)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    journals = sorted((tmp_path / "journals").glob("*.json"))
    assert len(journals) == 2, journals
    ids = {json.loads(j.read_text())["gameday"]["run_id"] for j in journals}
    assert all(any(j.stem.endswith(run_id) for j in journals) for run_id in ids)
    verified = gameday(["audit", "verify", str(tmp_path / "journals")], env)
    assert verified.returncode == 0 and "2 journals, chain intact" in verified.stdout, \
        verified.stdout + verified.stderr


def test_run_refuses_a_journal_path_that_exists(tmp_path: Path) -> None:
    path = _passing_experiment(tmp_path / "e.yaml")
    taken = tmp_path / "taken.json"
    taken.write_text("{}")
    done = gameday(["run", str(path), "--journal-path", str(taken)], env_for(tmp_path))
    assert done.returncode == 2 and "already exists" in done.stderr, done.stderr
    assert taken.read_text() == "{}"
