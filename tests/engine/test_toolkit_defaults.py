"""gameday run fixes the six unsafe Chaos Toolkit defaults (docs/running.md).

Each test runs the same experiment with the real ``chaos run`` and the real
``gameday run`` (subprocesses, real signals, real files) and shows the difference.
"""

import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BIN, REPO, chaos, gameday, python_activity, read_json, write_experiment
from tests.waiting import wait_until


def experiment(method: list[dict[str, Any]], *, rollback_marker: Path | None = None,
               probes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    document: dict[str, Any] = {"title": "toolkit default", "description": "d", "method": method}
    if probes is not None:
        document["steady-state-hypothesis"] = {"title": "h", "probes": probes}
    if rollback_marker is not None:
        document["rollbacks"] = [python_activity("action", "rollback", "mark",
                                                 path=str(rollback_marker))]
    return document


def start(cmd: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    argv = [str(BIN / cmd)] + (["--no-version-check"] if cmd == "chaos" else []) + args
    return subprocess.Popen(argv, env=env, cwd=REPO, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)


def interrupt_during_activity(cmd: str, tmp: Path, env: dict[str, str],
                              signum: int) -> tuple[int, Path, Path]:
    tmp.mkdir()
    marker, rollback = tmp / "activity", tmp / "rollback"
    path = write_experiment(tmp / "exp.yaml", experiment(
        [python_activity("action", "slow-action", "sleep", seconds=4, marker=str(marker))],
        rollback_marker=rollback))
    proc = start(cmd, ["run", str(path), "--journal-path", str(tmp / "journal.json")], env)
    wait_until(marker.with_suffix(".started").exists, 30, "the activity to start")
    proc.send_signal(signum)
    proc.communicate(timeout=60)
    return proc.returncode, marker, rollback


def test_sigterm_interrupts_and_rolls_back(tmp_path: Path, env: dict[str, str]) -> None:
    """Toolkit: SIGTERM during a Python activity is swallowed, exit 0. Ours: 143, rolled back."""
    code, marker, rollback = interrupt_during_activity("chaos", tmp_path / "chaos", env,
                                                       signal.SIGTERM)
    assert code == 0  # the toolkit swallowed it: the activity "failed", the run went on
    assert read_json(tmp_path / "chaos" / "journal.json")["status"] == "completed"
    code, marker, rollback = interrupt_during_activity("gameday", tmp_path / "ours", env,
                                                       signal.SIGTERM)
    assert code == 143
    assert not marker.exists()  # the activity was cut short
    assert rollback.read_text() == "ran\n"
    journal = read_json(tmp_path / "ours" / "journal.json")
    assert journal["status"] == "interrupted"
    assert journal["gameday"]["verdict"]["exit_code"] == 143


def test_ctrl_c_still_plays_rollbacks(tmp_path: Path, env: dict[str, str]) -> None:
    """Toolkit: the default strategy skips rollbacks after Ctrl-C. Ours: always plays them."""
    code, _, rollback = interrupt_during_activity("chaos", tmp_path / "chaos", env,
                                                  signal.SIGINT)
    assert not rollback.exists()
    code, _, rollback = interrupt_during_activity("gameday", tmp_path / "ours", env,
                                                  signal.SIGINT)
    assert code == 130
    assert rollback.read_text() == "ran\n"


def test_an_interrupted_run_says_which_signal_at_which_step(tmp_path: Path,
                                                            env: dict[str, str]) -> None:
    """The activity a signal cuts short is shown and judged as interrupted, not failed;
    the verdict's first reason (journal, terminal, report) names the signal and the step."""
    marker = tmp_path / "activity"
    path = write_experiment(tmp_path / "exp.yaml", experiment(
        [python_activity("action", "first", "ok"),
         python_activity("probe", "recovered-within-rto", "sleep", seconds=8,
                         marker=str(marker))],
        rollback_marker=tmp_path / "rollback"))
    journal_path = tmp_path / "journal.json"
    proc = start("gameday", ["run", str(path), "--journal-path", str(journal_path)], env)
    wait_until(marker.with_suffix(".started").exists, 30, "the probe to start")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    where = "interrupted by SIGINT during method, step 2, probe 'recovered-within-rto'"
    assert "INTR probe recovered-within-rto" in out and "FAIL" not in out, out
    verdict = read_json(journal_path)["gameday"]["verdict"]
    assert verdict["status"] == "interrupted" and verdict["reasons"] == [where]
    page = gameday(["report", str(journal_path), "--format", "md", "-o", "-"], env).stdout
    assert where in page


def test_unmet_steady_state_before_fails(tmp_path: Path, env: dict[str, str]) -> None:
    """Toolkit: an unmet before-check ends 'completed', exit 0. Ours: exit 1, reason named."""
    probe = python_activity("probe", "service-healthy", "value", result=False)
    probe["tolerance"] = True
    path = write_experiment(tmp_path / "exp.yaml", experiment([], probes=[probe]))
    theirs = chaos(["run", str(path), "--journal-path", str(tmp_path / "chaos.json")], env)
    assert theirs.returncode == 0
    assert read_json(tmp_path / "chaos.json")["status"] == "completed"
    ours = gameday(["run", str(path), "--journal-path", str(tmp_path / "ours.json")], env)
    assert ours.returncode == 1, ours.stdout + ours.stderr
    reasons = read_json(tmp_path / "ours.json")["gameday"]["verdict"]["reasons"]
    assert reasons == ["steady state before: probe 'service-healthy' out of tolerance (got False)"]


def test_activity_timeout_is_enforced(tmp_path: Path, env: dict[str, str]) -> None:
    """Toolkit: ``timeout`` is ignored for Python activities. Ours: the activity is stopped."""
    action = python_activity("action", "hangs", "sleep", seconds=3)
    action["timeout"] = 0.5
    path = write_experiment(tmp_path / "exp.yaml", experiment([action]))
    theirs = chaos(["run", str(path), "--journal-path", str(tmp_path / "chaos.json")], env)
    run = read_json(tmp_path / "chaos.json")["run"][0]
    assert theirs.returncode == 0 and run["status"] == "succeeded" and run["duration"] >= 3
    ours = gameday(["run", str(path), "--journal-path", str(tmp_path / "ours.json")], env)
    assert ours.returncode == 1
    run = read_json(tmp_path / "ours.json")["run"][0]
    assert run["status"] == "failed" and run["duration"] < 2
    assert "ran past its timeout of 0.5 s" in ours.stdout


def test_raising_tolerance_still_journals_and_rolls_back(tmp_path: Path,
                                                        env: dict[str, str]) -> None:
    """Toolkit: a tolerance that raises escapes (no journal, no rollbacks). Ours: both, exit 1."""
    probe = python_activity("probe", "queue-depth", "value", result=None)
    probe["tolerance"] = {"type": "range", "range": [0, 10]}
    theirs_marker, ours_marker = tmp_path / "rb-chaos", tmp_path / "rb-ours"
    path = write_experiment(tmp_path / "chaos.yaml", experiment(
        [], probes=[probe], rollback_marker=theirs_marker))
    theirs = chaos(["run", str(path), "--journal-path", str(tmp_path / "chaos.json")], env)
    assert "Traceback" in theirs.stdout + theirs.stderr
    assert not (tmp_path / "chaos.json").exists() and not theirs_marker.exists()
    path = write_experiment(tmp_path / "ours.yaml", experiment(
        [], probes=[probe], rollback_marker=ours_marker))
    ours = gameday(["run", str(path), "--journal-path", str(tmp_path / "ours.json")], env)
    assert ours.returncode == 1
    assert ours_marker.read_text() == "ran\n"
    journal = read_json(tmp_path / "ours.json")
    assert journal["status"] == "failed"
    assert any("stopped on an error" in r for r in journal["gameday"]["verdict"]["reasons"])
    assert "Traceback" not in ours.stdout + ours.stderr


@pytest.mark.parametrize("module_func", [("tests.fixtures.acts", "fail")])
def test_failed_fault_action_fails_the_run(tmp_path: Path, env: dict[str, str],
                                           module_func: tuple[str, str]) -> None:
    """Toolkit: a fault that could not be injected does not fail the run. Ours: exit 1."""
    path = write_experiment(tmp_path / "exp.yaml", experiment(
        [python_activity("action", "inject-fault", "fail", message="agent refused: no GPU 9")]))
    theirs = chaos(["run", str(path), "--journal-path", str(tmp_path / "chaos.json")], env)
    assert theirs.returncode == 0
    ours = gameday(["run", str(path), "--journal-path", str(tmp_path / "ours.json")], env)
    assert ours.returncode == 1
    reasons = read_json(tmp_path / "ours.json")["gameday"]["verdict"]["reasons"]
    assert reasons == ["fault action 'inject-fault' failed: agent refused: no GPU 9"]
