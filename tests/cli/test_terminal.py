"""What people see: help on every command, counts in words, the verdict table's columns,
the report command after a run, and log lines above (not through) a live progress line
(rich's real Progress on a forced terminal; the CLI runs as a real subprocess)."""

import argparse
import io
import logging
import re
import sys
from pathlib import Path

import pytest
from rich.console import Console
from rich.progress import Progress

from gameday.agent.serve import serve_parser
from gameday.cli.main import _parser
from gameday.logs import configure
from gameday.report.terminal import print_verdict
from tests.conftest import cli_env, gameday, python_activity, write_experiment


def test_bare_gameday_prints_help(tmp_path: Path) -> None:
    result = gameday([], cli_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: gameday") and "gameday init" in result.stdout


def _parsers(parser: argparse.ArgumentParser, path: str = "gameday"
             ) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if sub.add_help:  # agent serve|policy: their own parsers (--help there)
                    found += _parsers(sub, f"{path} {name}")
    return found


def test_every_option_and_positional_has_help_and_every_command_an_example() -> None:
    for path, parser in _parsers(_parser())[1:]:
        assert re.match(r"example:\n  .*gameday ", parser.epilog or ""), path
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                assert all(choice.help for choice in action._choices_actions), path
            else:
                assert action.help, f"{path} {action.option_strings or action.dest}"


def test_the_agent_commands_have_help_and_examples_too(tmp_path: Path) -> None:
    parser = serve_parser()
    assert all(action.help for action in parser._actions)
    assert (parser.epilog or "").startswith("example:\n")
    result = gameday(["agent", "policy", "--help"], cli_env(tmp_path))
    assert result.returncode == 0 and "--check FILE       the policy file" in result.stdout
    assert "example:\n  gameday agent policy --check " in result.stdout


def test_the_help_of_run_ends_with_its_example(tmp_path: Path) -> None:
    result = gameday(["run", "--help"], cli_env(tmp_path))
    assert result.returncode == 0
    assert result.stdout.rstrip().endswith(
        "example:\n  gameday run experiments/gpu-ecc-dbe-reshard.yaml --target lab")


def _journal(verdict: str) -> dict[str, object]:
    return {"steady_states": {"before": {"steady_state_met": True, "probes": [{}]},
                              "after": {"steady_state_met": True, "probes": [{}, {}]}},
            "gameday": {"faults": [], "verifiers": [
                {"name": "recovered", "verifier": "rto.measure_recovery", "passed": True,
                 "measurement": {"rto_s": 1.5, "slo_s": 20}}],
                "verdict": {"passed": False, "status": verdict, "exit_code": 130,
                            "reasons": ["interrupted by SIGINT"]}}}


def test_the_verdict_table_counts_in_words_and_its_header_is_aligned() -> None:
    out = io.StringIO()
    print_verdict(_journal("interrupted"), out)
    lines = out.getvalue().strip("\n").splitlines()
    header, rule, *rows = lines
    assert [row.split("  ")[0] for row in rows][:2] == ["steady state before",
                                                       "steady state after"]
    assert "1 probe" in rows[0] and "1 probes" not in rows[0] and "2 probes" in rows[1]
    verdict_at, detail_at = header.index("verdict"), header.index("detail")
    assert [len(part) for part in rule.split("  ")] == [verdict_at - 2,
                                                        detail_at - verdict_at - 2, 6]
    for row in rows:
        assert row[verdict_at - 2:verdict_at] == "  " and row[verdict_at] != " ", row
        assert row[detail_at - 2:detail_at] == "  " and row[detail_at] != " ", row
    assert any("INTERRUPTED" in row for row in rows)


def test_run_names_the_report_command_for_its_journal(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    path = write_experiment(tmp_path / "one.yaml", {
        "title": "one", "description": "d", "method": [python_activity("action", "ok", "ok")]})
    journal = tmp_path / "one.json"
    result = gameday(["run", str(path), "--journal-path", str(journal)], env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "method: 1 activity ..." in result.stdout
    (command,) = re.findall(r"^report:  (gameday report .*)$", result.stdout, re.MULTILINE)
    assert command == f"gameday report {journal}"
    report = gameday(command.split()[1:], env)
    assert report.returncode == 0, report.stderr
    assert journal.with_suffix(".html").read_text().lower().startswith("<!doctype html>")


def test_run_html_writes_the_report_and_names_it_once(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    path = write_experiment(tmp_path / "one.yaml", {
        "title": "one", "description": "d", "method": [python_activity("action", "ok", "ok")]})
    for given, written in ((None, tmp_path / "one.html"),
                           (tmp_path / "elsewhere.html", tmp_path / "elsewhere.html")):
        journal = tmp_path / f"one-{written.stem}.json"
        argv = ["run", str(path), "--journal-path", str(journal), "--html"]
        result = gameday(argv + ([str(given)] if given else []), env)
        assert result.returncode == 0, result.stdout + result.stderr
        written = written if given else journal.with_suffix(".html")
        assert re.findall(r"^report:.*$", result.stdout, re.MULTILINE) == [
            f"report:  {written}"]
        assert written.read_text().lower().startswith("<!doctype html>")


def test_the_verdict_is_shown_before_the_lab_the_run_started_stops(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lab is a stand-in here (a lease that records when it starts and stops): the
    order of what the user reads is what is tested."""
    from gameday.engine import runner
    from gameday.targets import lab

    events: list[str] = []

    class RecordingLease:
        def __init__(self, lab_dir: Path, say: object) -> None:
            pass

        def ensure(self) -> None:
            events.append("lab started")

        def release(self) -> None:
            events.append("lab stopped")

    monkeypatch.setenv("GAMEDAY_HOME", str(tmp_path))
    monkeypatch.setattr(lab, "LabLease", RecordingLease)
    monkeypatch.setattr(runner, "open_target", lambda *args, **kwargs: None)
    path = write_experiment(tmp_path / "one.yaml", {
        "title": "one", "description": "d", "method": [python_activity("action", "ok", "ok")]})
    options = runner.RunOptions(path=path, target="lab", journal_path=tmp_path / "one.json",
                                out=io.StringIO(),
                                show=lambda outcome: events.append(f"shown {outcome.exit_code}"))
    assert runner.run(options).exit_code == 0
    assert events == ["lab started", "shown 0", "lab stopped"]


@pytest.fixture
def restored_logging() -> object:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield None
    root.handlers[:] = handlers
    root.setLevel(level)


def test_log_lines_land_above_a_live_progress_line(restored_logging: object) -> None:
    configure(None)
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=100, color_system=None)
    before = sys.stderr
    with Progress(console=console, transient=False) as progress:
        task = progress.add_task("game day: steady state before ...", total=2)
        progress.advance(task)
        assert sys.stderr is not before  # rich took it over for the live display
        logging.getLogger("gameday.test").warning("agent answered slowly")
        logging.getLogger("chaostoolkit").error("toolkit says boom")
    assert sys.stderr is before
    lines = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", line) for line in
             screen.getvalue().replace("\r", "\n").splitlines()]
    logged = [line for line in lines if "agent answered slowly" in line or "boom" in line]
    assert len(logged) == 2, lines
    assert not any("game day:" in line for line in logged)  # never on the progress line
