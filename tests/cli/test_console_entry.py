"""The ``gameday`` console script (``gameday.cli.main:entry``) freezes what is left for
the interpreter's exit to collect (docs/gamedays.md, "Run overhead"), and its exit still
does what an exit must: the command's status, the journal whole, the log flushed, a
thread an activity left running joined."""

import gc
import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from gameday.cli.main import main
from tests.conftest import REPO, cli_env, python_activity, write_experiment

SCRIPT = Path(sys.executable).parent / "gameday"


def test_the_installed_script_is_the_entry() -> None:
    (script,) = entry_points(group="console_scripts", name="gameday")
    assert script.value == "gameday.cli.main:entry"
    assert "from gameday.cli.main import entry" in SCRIPT.read_text()


def _experiment(tmp_path: Path, deviates: bool) -> Path:
    """The hypothesis holds while a flag is absent; the method leaves a thread running,
    then writes the flag, or another file when the run is to pass."""
    flag = tmp_path / "flag"
    return write_experiment(tmp_path / "exit.yaml", {
        "title": "exit", "description": "what an exit leaves",
        "steady-state-hypothesis": {"title": "no flag", "probes": [{
            "type": "probe", "name": "no flag", "tolerance": False, "provider": {
                "type": "python", "module": "os.path", "func": "exists",
                "arguments": {"path": str(flag)}}}]},
        "method": [python_activity("action", "later", "later",
                                   path=str(tmp_path / "thread.done"), seconds=0.3),
                   python_activity("action", "mark", "mark",
                                   path=str(flag if deviates else tmp_path / "other"))]})


@pytest.mark.parametrize(("deviates", "status"), [(False, 0), (True, 1)])
def test_the_scripts_exit_keeps_what_an_exit_must(tmp_path: Path, deviates: bool,
                                                  status: int) -> None:
    journal = tmp_path / "journals" / "exit.json"
    result = subprocess.run([str(SCRIPT), "run", str(_experiment(tmp_path, deviates)),
                             "--journal-path", str(journal)], env=cli_env(tmp_path), cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == status, result.stderr
    assert (tmp_path / "thread.done").read_text() == "done"
    verified = subprocess.run([str(SCRIPT), "audit", "verify", str(journal.parent),
                               "--output", "json"], env=cli_env(tmp_path), cwd=REPO,
                              capture_output=True, text=True, timeout=120)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    log = (tmp_path / "home" / "logs" / "gameday.log").read_text().splitlines()
    events = [json.loads(line)["event"] for line in log]  # every line whole
    ended = "deviated" if deviates else "completed"
    assert f"Experiment ended with status: {ended}" in events[-2:]


def test_entry_freezes_and_main_does_not(tmp_path: Path) -> None:
    frozen = gc.get_freeze_count()
    assert main(["faults", "--output", "json"]) == 0
    assert gc.get_freeze_count() == frozen
    code = ("import gc, sys; from gameday.cli.main import entry; status = entry(); "
            "print(status, gc.get_freeze_count() > 0, file=sys.__stderr__)")
    result = subprocess.run([sys.executable, "-c", code, "faults", "--output", "json"],
                            env=cli_env(tmp_path), cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.stderr.split()[-2:] == ["0", "True"]
